package consumer

import (
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
)

// When a partition's reading can stop: once nothing after it can change
// the state at the point. The proof rests on what docs/events.md promises
// and on how kubewire stamps markers:
//
//   - A snapshot.started marker is a barrier: every event enqueued before
//     it is in the partition before it, every event enqueued after it is
//     after it. Nothing else orders two keys within a partition (the
//     dispatcher's shards reorder them), so a live event alone proves
//     nothing about the events around it.
//   - kubewire handles one resource's changes from one watch, whose
//     versions rise; every object event it enqueues (live, synced, a
//     relist's delete) is at or below the highest version it handled.
//
// So for a point N: let w be an object event of the resource above N read
// in the partition, and M a later snapshot.started marker of the resource
// in it whose snapshotrv is at least w's version. M was enqueued after w
// (w is before the barrier), when kubewire had handled w: every change at
// or below N was enqueued before M, and is in the partition before it.
// Every object event after M is a change above N, a repeat of one before
// M (a restart resumes from its checkpoint), a snapshot record of an
// object unchanged since, or a delete a relist noticed, which happened
// after the watch's position and so after N. The snapshotrv condition
// keeps a marker of a restarted kubewire, which has not yet handled what
// the old one had, from ending the read: such a marker carries no
// snapshotrv, or its checkpoint, below w. A watch.gap between w and M
// breaks the chain (versions may have gone back): w no longer counts.
// The read stops at M, or later once every snapshot window opened in the
// partition before M has completed there (its completed marker is
// published after its records, not ordered with later events, and the
// choice of snapshot and its prune need it).
//
// A point given as a time ends the scan at the first snapshot.started
// marker stamped after it: the events kubewire observed at or before the
// time were handled before that marker, so in the partition before it.
//
// A backwards gap after the stop is not looked for: the point is taken in
// the history that first reached it. A resource watched per namespace has
// one watch per namespace, whose versions do not rise together: its
// partitions are read to their end.
type stops struct {
	rv           uint64
	at           time.Time
	perNamespace bool
	parts        map[string]*partStop
}

func newStops(rv uint64, at time.Time, perNamespace bool) *stops {
	return &stops{rv: rv, at: at, perNamespace: perNamespace, parts: map[string]*partStop{}}
}

func (s *stops) of(partition string) *partStop {
	p := s.parts[partition]
	if p == nil {
		p = &partStop{s: s, open: map[string]bool{}}
		s.parts[partition] = p
	}
	return p
}

// partStop is one partition's progress towards its stop.
type partStop struct {
	s *stops
	// above is the lowest version above the point of an object event
	// read since the last gap, 0 if none.
	above uint64
	// ending says a barrier was passed; open are the windows opened
	// before it that have not completed.
	ending bool
	open   map[string]bool
}

// next takes the partition's next event of the resource, and says
// whether reading the partition can stop after it.
func (p *partStop) next(ev *event.Event) bool {
	if p.s.perNamespace || p.s.rv == 0 && p.s.at.IsZero() {
		return false
	}
	switch ev.Type() {
	case encoding.TypeGap:
		p.above = 0
	case encoding.TypeSnapshotCompleted:
		delete(p.open, ext(ev, encoding.ExtSnapshotID))
	case encoding.TypeSnapshotStarted:
		if !p.ending {
			if p.s.rv != 0 {
				rv, err := strconv.ParseUint(ext(ev, encoding.ExtSnapshotRV), 10, 64)
				p.ending = err == nil && p.above != 0 && rv >= p.above
			} else {
				p.ending = ev.Time().After(p.s.at)
			}
			if !p.ending {
				p.open[ext(ev, encoding.ExtSnapshotID)] = true
			}
		}
	default:
		if rv, err := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64); err == nil && rv > p.s.rv && (p.above == 0 || rv < p.above) {
			p.above = rv
		}
	}
	return p.ending && len(p.open) == 0
}
