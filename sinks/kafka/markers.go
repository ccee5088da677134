package kafka

import (
	"sync"

	"github.com/kubewire/kubewire/encoding"
)

// markerAcks remembers, for a snapshot marker whose Write failed in some of
// its topic's partitions, the partitions that did acknowledge it. The
// dispatcher writes a failed event again, whole; without this, every
// partition that took the marker the first time would get a second copy,
// and a consumer of that partition would see the snapshot's frame twice.
// The retry goes only where the marker is missing; a partition whose batch
// is in doubt resends the very same bytes (see pending), so each partition
// ends up with the marker once.
//
// Entries are keyed by the event, which the dispatcher hands back unchanged
// when it retries, and forgotten once the marker is written everywhere or
// refused for good. A marker whose retry never comes (shutdown) leaves its
// entry until the sink closes: a few per snapshot at most.
type markerAcks struct {
	mu   sync.Mutex
	done map[*encoding.Event]map[int]struct{}
}

// acked returns the partitions that already hold ev. The map must not be
// changed; it is nil when none do.
func (m *markerAcks) acked(ev *encoding.Event) map[int]struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done[ev]
}

// add records that partition id acknowledged ev.
func (m *markerAcks) add(ev *encoding.Event, id int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		m.done = map[*encoding.Event]map[int]struct{}{}
	}
	parts := m.done[ev]
	if parts == nil {
		parts = map[int]struct{}{}
		m.done[ev] = parts
	}
	parts[id] = struct{}{}
}

// forget drops what is known of ev.
func (m *markerAcks) forget(ev *encoding.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.done, ev)
}
