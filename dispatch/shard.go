package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// entry is one queued item of a shard, or a barrier.
type entry struct {
	item *Item
	key  string
	// size is the item's Change.Size, as counted in the dispatcher's bytes.
	size int64
	// conflated counts the earlier changes of this object folded into it;
	// folded holds their Marks, done when this entry is; conflatedFrom is
	// the resourceVersion of the oldest of them, so that the event can say
	// which versions it stands for.
	conflated     int
	folded        []informer.Mark
	conflatedFrom string
	// old: an earlier process's record was folded into this entry.
	old bool
	// epoch is the number of barriers queued before this entry. Folding is
	// allowed only within one epoch: moving a change across a snapshot
	// marker would change what the consumer's snapshot rule concludes.
	epoch   uint64
	barrier *barrier
	// incomplete is set on a completed marker: how many records of its
	// snapshot were dropped.
	incomplete int
	// ev is the event this sink writes, built on the entry's first attempt
	// and handed to the sink again on every retry: an adapter may know a
	// retry by its events (the Kafka sink skips the records a partition
	// already holds).
	ev *encoding.Event
	// retried: the entry was held after a failed attempt (see lane.attempt).
	retried bool
}

// barrier is a snapshot marker queued in every shard at once.
type barrier struct {
	item      *Item
	remaining atomic.Int32
	done      chan struct{}
}

// shard is one FIFO. Entries of one key always land in the same shard, so
// taking from the head in order keeps per-key order.
type shard struct {
	mu   sync.Mutex
	q    []*entry
	head int
	// pending is the newest queued entry of each key not yet taken by the
	// worker; conflation replaces its item.
	pending map[string]*entry
	epoch   uint64
	closed  bool
	notify  chan struct{}
	// keys are the keys of the batch take is filling; the worker's own.
	keys map[string]struct{}
}

// push appends it, or, when the buffer is full, folds it into the queued
// entry of the same object. It reports whether it appended, and by how many
// bytes the queued data grew. A delete is never folded away: a change after
// a queued delete (a re-creation) is appended.
func (s *shard) push(it *Item, full bool) (appended bool, delta int64) {
	key := it.Change.Key
	size := it.bytes()
	s.mu.Lock()
	if full {
		if p := s.pending[key]; p != nil && p.epoch == s.epoch && p.item.Change.Op != informer.OpDeleted && sameObject(p.item.Change, it.Change) {
			delta = size - p.size
			// The folded change is done only once the change that now
			// stands for it is: until then its versions are declared
			// nowhere.
			p.folded = append(append(p.folded, p.item.Change.Mark), it.folded...)
			if p.conflated == 0 {
				// The queued change is the first one folded away.
				p.conflatedFrom = p.item.resourceVersion()
			}
			p.old = p.old || p.item.old
			p.item, p.size = it, size
			p.conflated += 1 + it.conflated
			s.mu.Unlock()
			return false, delta
		}
	}
	e := &entry{item: it, key: key, epoch: s.epoch, size: size, conflated: it.conflated, folded: it.folded, conflatedFrom: it.conflatedFrom}
	s.q = append(s.q, e)
	s.pending[key] = e
	s.mu.Unlock()
	s.wake()
	return true, size
}

func (s *shard) pushBarrier(b *barrier) {
	s.mu.Lock()
	s.q = append(s.q, &entry{barrier: b, key: b.item.Change.Key})
	s.epoch++
	s.mu.Unlock()
	s.wake()
}

// unshift puts entries a worker took but could not deliver back at the
// head, in their order, so shutdown finds every undelivered entry queued.
// Their pending-map slots are not restored: nothing is folded after close.
func (s *shard) unshift(es []*entry) {
	if len(es) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rest := s.q[s.head:]
	q := make([]*entry, 0, len(es)+len(rest))
	q = append(append(q, es...), rest...)
	s.q, s.head = q, 0
}

// rest returns what is queued, for shutdown.
func (s *shard) rest() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*entry(nil), s.q[s.head:]...)
}

func (s *shard) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *shard) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
}

func (s *shard) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take waits for work. It returns up to max entries in order, stopping before
// a barrier; or the barrier at the head; or nothing once the shard is closed
// and empty, or ctx ends.
//
// With distinct, it also stops before a second entry of a key, so that a
// Write never holds two versions of one key: the later one then cannot
// reach the broker while the earlier one's fate is open. A refusal that
// comes as shutdown cancels writes is not trusted, and its event is kept
// for the next start; had a later version of its key been acknowledged in
// the same Write, the next start would write the older one after it (issue
// 46: rv 2, 1, 2).
func (s *shard) take(ctx context.Context, buf []*entry, max int, distinct bool) ([]*entry, *barrier) {
	return s.takeUntil(ctx, buf, max, distinct, nil, nil)
}

// takeUntil is take that also returns, with nothing, when until fires, and
// that leaves the entries of the keys skip names where they are: queued,
// so that a full buffer folds newer changes into them. It waits while
// every entry before the next barrier is skipped.
func (s *shard) takeUntil(ctx context.Context, buf []*entry, max int, distinct bool, until <-chan time.Time, skip func(key string) bool) ([]*entry, *barrier) {
	for {
		s.mu.Lock()
		if s.head < len(s.q) {
			if b := s.q[s.head].barrier; b != nil {
				s.pop()
				s.mu.Unlock()
				return buf, b
			}
			if distinct {
				if s.keys == nil {
					s.keys = map[string]struct{}{}
				}
				clear(s.keys)
			}
			if skip == nil {
				for s.head < len(s.q) && len(buf) < max && s.q[s.head].barrier == nil {
					e := s.q[s.head]
					if distinct {
						if _, again := s.keys[e.key]; again {
							break
						}
						s.keys[e.key] = struct{}{}
					}
					s.pop()
					if s.pending[e.key] == e {
						delete(s.pending, e.key)
					}
					buf = append(buf, e)
				}
				s.mu.Unlock()
				return buf, nil
			}
			if buf = s.takeSkipping(buf, max, distinct, skip); len(buf) > 0 {
				s.mu.Unlock()
				return buf, nil
			}
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return buf, nil
		}
		select {
		case <-s.notify:
		case <-until:
			return buf, nil
		case <-ctx.Done():
			return buf, nil
		}
	}
}

// takeSkipping moves up to max entries before the next barrier onto buf,
// in order, passing over those of the keys skip names, which keep their
// places; with distinct, it passes over a second entry of a key too (see
// take), which keeps its place after the first. s.mu is held.
func (s *shard) takeSkipping(buf []*entry, max int, distinct bool, skip func(key string) bool) []*entry {
	w, i := s.head, s.head
	for ; i < len(s.q) && len(buf) < max && s.q[i].barrier == nil; i++ {
		e := s.q[i]
		_, again := s.keys[e.key]
		if skip(e.key) || distinct && again {
			s.q[w] = e
			w++
			continue
		}
		if distinct {
			s.keys[e.key] = struct{}{}
		}
		if s.pending[e.key] == e {
			delete(s.pending, e.key)
		}
		buf = append(buf, e)
	}
	if w < i {
		n := copy(s.q[w:], s.q[i:])
		clear(s.q[w+n:])
		s.q = s.q[:w+n]
		if s.head == len(s.q) {
			s.q, s.head = s.q[:0], 0
		}
	}
	return buf
}

// pop drops the head. The backing array is reused once the queue empties, and
// compacted when the dead prefix dominates, so a long outage followed by
// recovery does not pin the peak allocation forever.
func (s *shard) pop() {
	s.q[s.head] = nil
	s.head++
	switch {
	case s.head == len(s.q):
		s.q, s.head = s.q[:0], 0
		if cap(s.q) > 4096 {
			s.q = nil
		}
	case s.head > 1024 && s.head > len(s.q)/2:
		n := copy(s.q, s.q[s.head:])
		clear(s.q[n:])
		s.q, s.head = s.q[:n], 0
	}
}

// sameObject reports whether two changes of one key describe one object.
// They may not: with keyBy involvedObject every Event about a Pod shares
// the Pod's key, and folding one Event into another would lose the first.
func sameObject(a, b *informer.Change) bool {
	ua, okA := a.ObjectUID()
	ub, okB := b.ObjectUID()
	return okA && okB && ua == ub
}

// shardOf hashes key with FNV-1a; inline so the hot path does not allocate.
func shardOf(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// marks are the Marks the entry stands for: its change's, and those of the
// changes folded into it.
func (e *entry) marks() []informer.Mark {
	m := e.item.Change.Mark
	if len(e.folded) == 0 {
		if m == (informer.Mark{}) {
			return nil
		}
		return []informer.Mark{m}
	}
	return append([]informer.Mark{m}, e.folded...)
}

// spooled records that this sink wrote the entry to its spool. The entry
// is done with once its copy is read back and delivered: the record
// carries its marks, which come back counted as spooled.
func (e *entry) spooled() {
	e.item.Change.Mark.Spooled()
	for _, m := range e.folded {
		m.Spooled()
	}
}

// finish records that this sink is done with the entry's changes.
func (e *entry) finish() {
	e.item.Change.Mark.Done()
	for _, m := range e.folded {
		m.Done()
	}
}
