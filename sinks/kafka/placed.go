package kafka

import (
	"sync"
	"sync/atomic"

	"github.com/kubewire/kubewire/encoding"
)

// placedRecords remembers, for an event whose Write failed, the partitions
// that did acknowledge a record of it. The dispatcher writes a failed event
// again, whole; without this, the retry would send those records a second
// time, as new records, which the broker appends again:
//
//   - A snapshot marker goes to every partition of its topic. A partition
//     that took it the first time would get a second copy, and a consumer
//     of that partition would see the snapshot's frame twice. The retry
//     goes only where the marker is missing.
//   - A delete is two records in one partition, its event and then its
//     tombstone. When the batch limits put them in two requests, and the
//     first is acknowledged and the second is not, the event is in the log
//     but the delete failed. The retry sends only the tombstone. If the
//     tombstone's request is in doubt, it is pending in the partition and
//     goes out again unchanged, ahead of the retry, which then sends
//     nothing of the delete (partition.skipResolved).
//
// Either way each partition ends up with each record once: a partition
// whose batch is in doubt resends the very same bytes (see pending).
//
// Entries are keyed by the event, which the dispatcher hands back unchanged
// when it retries, and forgotten once the event is written everywhere or
// refused for good. An event whose retry never comes (shutdown) leaves its
// entry until the sink closes: a few per failed Write at most.
type placedRecords struct {
	mu   sync.Mutex
	done map[*encoding.Event]map[int]struct{}
	// events is len(done), so that a delete's lookup costs no lock while
	// nothing is remembered, which is nearly always.
	events atomic.Int32
}

// acked returns the partitions that already hold ev's record (a marker's
// copy, a delete's event). The map must not be changed; it is nil when none
// do.
func (m *placedRecords) acked(ev *encoding.Event) map[int]struct{} {
	if m.events.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done[ev]
}

// add records that partition id acknowledged ev's record.
func (m *placedRecords) add(ev *encoding.Event, id int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		m.done = map[*encoding.Event]map[int]struct{}{}
	}
	parts := m.done[ev]
	if parts == nil {
		parts = map[int]struct{}{}
		m.done[ev] = parts
		m.events.Store(int32(len(m.done)))
	}
	parts[id] = struct{}{}
}

// forget drops what is known of ev.
func (m *placedRecords) forget(ev *encoding.Event) {
	if m.events.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.done, ev)
	m.events.Store(int32(len(m.done)))
}

// records returns how many records the partitions hold of the events
// remembered: what the next process sends again if they were never
// written whole.
func (m *placedRecords) records() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, parts := range m.done {
		n += len(parts)
	}
	return n
}
