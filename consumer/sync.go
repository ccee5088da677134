package consumer

import (
	"context"
	"sync"
)

// syncState tracks the sources bound to a View that have not yet caught up
// with the broker as it stood when they started.
type syncState struct {
	mu      sync.Mutex
	pending int
	done    chan struct{}
}

func newSyncState() syncState {
	c := make(chan struct{})
	close(c)
	return syncState{done: c}
}

// addSource binds one more source; the returned func reports it caught up
// (calling it again does nothing).
func (v *View) addSource() func() {
	s := &v.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 {
		s.done = make(chan struct{})
	}
	s.pending++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pending--; s.pending == 0 {
				close(s.done)
			}
		})
	}
}

// HasSynced reports whether every source bound to the View has applied what
// its broker held when the source started. A View with no source is synced.
func (v *View) HasSynced() bool {
	select {
	case <-v.synced():
		return true
	default:
		return false
	}
}

// WaitForSync waits until HasSynced or ctx ends.
func (v *View) WaitForSync(ctx context.Context) error {
	select {
	case <-v.synced():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *View) synced() <-chan struct{} {
	v.sync.mu.Lock()
	defer v.sync.mu.Unlock()
	return v.sync.done
}
