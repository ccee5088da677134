package dispatch

import (
	"sync"

	"github.com/kubewire/kubewire/informer"
)

// snapshotsInFlight holds, per resource, the snapshots whose completed
// marker has been enqueued but not yet written (or given up on). A watcher
// asks before it starts a periodic snapshot, so that a sink that is behind
// holds at most one snapshot's worth of records per resource instead of one
// per interval. Snapshots are tracked by id, so a marker replayed from an
// earlier run's spool cannot cancel one of this run's.
type snapshotsInFlight struct {
	mu  sync.Mutex
	ids map[string]map[string]bool // resource key prefix -> snapshot ids
}

func (s *snapshotsInFlight) add(c *informer.Change) {
	if c.Op != informer.OpSnapshotCompleted {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]map[string]bool{}
	}
	if s.ids[c.Key] == nil {
		s.ids[c.Key] = map[string]bool{}
	}
	s.ids[c.Key][c.SnapshotID] = true
}

// done forgets the snapshot of a completed marker that was written or
// given up on.
func (s *snapshotsInFlight) done(c *informer.Change) {
	if c.Op != informer.OpSnapshotCompleted {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids[c.Key], c.SnapshotID)
	if len(s.ids[c.Key]) == 0 {
		delete(s.ids, c.Key)
	}
}

func (s *snapshotsInFlight) pending(keyPrefix string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids[keyPrefix]) > 0
}

// SnapshotPending reports whether a snapshot of the resource with this key
// prefix is still waiting to be written to the sink.
func (d *Dispatcher) SnapshotPending(keyPrefix string) bool {
	return d.snapshots.pending(keyPrefix)
}
