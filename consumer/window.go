package consumer

import (
	"slices"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
)

// windowKey names a snapshot window: its partition and its snapshot id.
type windowKey struct{ partition, snapshotID string }

// window is an open snapshot window: its resource (the started marker's
// partition key) and the seq of its started marker.
type window struct {
	resource string
	start    uint64
}

// listedSince reports whether a snapshot listed e in another partition,
// that of window wk or a later one: later in the order of the partition
// that listed it, where both started. When that partition has no window
// of wk's snapshot (it was added after that snapshot started), the order
// cannot be told and the key is pruned; the new partition's next
// snapshot read after the prune brings it back.
func (v *View) listedSince(e *entry, wk windowKey) bool {
	for _, l := range e.listed {
		if l.sid == wk.snapshotID {
			return true
		}
		this, ok1 := v.startOf(windowKey{l.partition, wk.snapshotID})
		that, ok2 := v.startOf(windowKey{l.partition, l.sid})
		if ok1 && ok2 && this < that {
			return true
		}
	}
	return false
}

// startOf returns the seq of the started marker of window wk, open or
// applied.
func (v *View) startOf(wk windowKey) (uint64, bool) {
	if w, ok := v.windows[wk]; ok {
		return w.start, true
	}
	s, ok := v.done[wk]
	return s, ok
}

// complete closes a snapshot window and, unless the marker says the
// snapshot is incomplete, prunes the keys of its resource in its partition
// that had no event since the window opened.
func (v *View) complete(pos Position, ev *event.Event, resource string, problem func(reason, detail string) []Problem) ([]change, []Problem) {
	wk := windowKey{v.interned(pos.Partition), ext(ev, encoding.ExtSnapshotID)}
	if _, ok := v.done[wk]; ok {
		// A replay of a window already applied: what it would prune
		// is measured from a started marker that is older than events
		// already applied, so it must prune nothing.
		v.stats.Replayed++
		return nil, nil
	}
	w, ok := v.windows[wk]
	v.done[wk] = w.start
	if !ok {
		v.done[wk] = v.seq
		// Normal when reading began inside the window (a stored
		// position, a compacted topic), but it prunes nothing, and says
		// so. The window counts as applied all the same: a later copy
		// of it, started included, is a replay.
		v.stats.Unmatched++
		return nil, problem(ProblemUnmatched, "snapshot "+wk.snapshotID+" was never started in partition "+pos.Partition)
	}
	delete(v.windows, wk)
	if hasExt(ev, encoding.ExtIncomplete) {
		// Test for presence, not value: a key without an event since
		// started may be an undelivered record, and is live.
		v.stats.Incomplete++
		return nil, nil
	}
	in := func(e *entry) bool {
		return e.partition == pos.Partition && e.seq < w.start && resourceOf(e.Key) == w.resource
	}
	for k, g := range v.gone {
		if in(&g) {
			delete(v.gone, k)
			delete(v.pruned, k)
		}
	}
	var cs []change
	for _, e := range v.objects {
		if !in(e) {
			continue
		}
		if len(e.listed) > 0 {
			listedSince := v.listedSince(e, wk)
			e.listed = slices.DeleteFunc(slices.Clone(e.listed), func(l listing) bool { return l.sid == wk.snapshotID })
			if listedSince {
				// This snapshot, or a later one, listed the key in
				// another partition, where it now lives (the topic
				// grew).
				continue
			}
		}
		v.stats.Pruned++
		cs = append(cs, v.remove(pos, e, nil, true))
		v.pruned[e.Key] = v.seq
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
	return cs, nil
}

// removed applies a resource.removed marker: every object of the resource
// held from this partition is gone, deletes streamed or not, and open
// windows of the resource in it will never complete.
func (v *View) removed(pos Position, resource string) []change {
	for wk, w := range v.windows {
		if wk.partition == pos.Partition && w.resource == resource {
			delete(v.windows, wk)
		}
	}
	var cs []change
	for _, e := range v.objects {
		if e.partition == pos.Partition && resourceOf(e.Key) == resource {
			cs = append(cs, v.remove(pos, e, nil, true))
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
	return cs
}
