package consumer

import (
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

// complete closes a snapshot window and, unless the marker says the
// snapshot is incomplete, prunes the keys of its resource in its partition
// that had no event since the window opened.
func (v *View) complete(pos Position, ev *event.Event, resource string) []change {
	wk := windowKey{v.interned(pos.Partition), ext(ev, encoding.ExtSnapshotID)}
	if _, ok := v.done[wk]; ok {
		// A replay of a window already applied: what it would prune
		// is measured from a started marker that is older than events
		// already applied, so it must prune nothing.
		v.stats.Replayed++
		return nil
	}
	v.done[wk] = struct{}{}
	w, ok := v.windows[wk]
	if !ok {
		v.stats.Unmatched++
		return nil
	}
	delete(v.windows, wk)
	if hasExt(ev, encoding.ExtIncomplete) {
		// Test for presence, not value: a key without an event since
		// started may be an undelivered record, and is live.
		v.stats.Incomplete++
		return nil
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
		if in(e) {
			v.stats.Pruned++
			cs = append(cs, v.remove(pos, e, nil, true))
			v.pruned[e.Key] = v.seq
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
	return cs
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
