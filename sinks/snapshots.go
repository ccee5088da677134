package sinks

import (
	"sync"

	"github.com/kubewire/kubewire/informer"
)

// snapshotsInFlight counts, per resource, the snapshots whose completed
// marker has been enqueued but not yet written. A watcher asks before it
// starts a periodic snapshot, so that a sink that is behind holds at most
// one snapshot's worth of records per resource instead of one per interval.
type snapshotsInFlight struct {
	mu sync.Mutex
	n  map[string]int // resource key prefix -> completed markers not yet written
}

func (s *snapshotsInFlight) add(c *informer.Change, delta int) {
	if c.Op != informer.OpSnapshotCompleted {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[c.Key] += delta
	if s.n[c.Key] <= 0 {
		delete(s.n, c.Key)
	}
}

func (s *snapshotsInFlight) pending(keyPrefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[keyPrefix] > 0
}

// SnapshotPending reports whether a snapshot of the resource with this key
// prefix is still waiting to be written to the sink.
func (d *Dispatcher) SnapshotPending(keyPrefix string) bool {
	return d.snapshots.pending(keyPrefix)
}
