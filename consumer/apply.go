package consumer

import (
	"encoding/json"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewire/kubewire/encoding"
)

// apply applies ev, read at pos, by the rule the View's doc lists. It runs
// under v.mu and returns the changes for the handlers and the problems to
// report, which deliver passes on once the lock is released.
func (v *View) apply(pos Position, ev *event.Event) ([]change, []Problem) {
	key := ext(ev, encoding.ExtPartitionKey)
	problem := func(reason, detail string) []Problem {
		v.stats.Problems++
		return []Problem{{Position: pos, Key: key, ID: ev.ID(), Reason: reason, Detail: detail}}
	}
	if key == "" {
		return nil, problem(ProblemMalformed, "no partitionkey")
	}
	if v.opt.Resource != "" && resourceOf(key) != v.opt.Resource {
		return nil, nil
	}
	v.seq++
	switch ev.Type() {
	case encoding.TypeSnapshotStarted:
		wk := windowKey{v.interned(pos.Partition), ext(ev, encoding.ExtSnapshotID)}
		if _, ok := v.done[wk]; ok {
			v.stats.Replayed++
			return nil, nil
		}
		if _, ok := v.windows[wk]; ok {
			// A copy of an open window's marker: the first copy's start
			// is kept, as a later one would count fewer keys as seen.
			v.stats.Duplicates++
			return nil, nil
		}
		v.windows[wk] = window{resource: key, start: v.seq}
		return nil, nil
	case encoding.TypeSnapshotCompleted:
		return v.complete(pos, ev, key), nil
	case encoding.TypeGap:
		return nil, v.watchGap(pos, ev, key, problem)
	case encoding.TypeRemoved:
		return v.removed(pos, key), nil
	case encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeSynced, encoding.TypeDeleted:
	default:
		return nil, problem(ProblemUnknownType, ev.Type())
	}

	uid, rv := ext(ev, encoding.ExtUID), ext(ev, encoding.ExtResourceVersion)
	if hasExt(ev, encoding.ExtConflated) {
		v.stats.Conflated++
	}
	held := v.objects[key]
	if held != nil {
		held.seq = v.seq
	}
	gone, wasGone := v.gone[key]
	if wasGone {
		gone.seq = v.seq
		v.gone[key] = gone
	}

	var sw window // the open window of a synced record, start 0 if none
	if ev.Type() == encoding.TypeSynced {
		wk := windowKey{pos.Partition, ext(ev, encoding.ExtSnapshotID)}
		if _, ok := v.done[wk]; ok {
			// A record of a window already applied, delivered again
			// after later events: it is older than what they did. The
			// key counts as seen (above), which only prunes less.
			v.stats.Replayed++
			return nil, nil
		}
		sw = v.windows[wk]
	}

	if ev.Type() == encoding.TypeDeleted {
		fsu := hasExt(ev, encoding.ExtFinalStateUnknown)
		if fsu {
			v.stats.FinalStateUnknown++
		}
		switch {
		case held == nil && wasGone && gone.UID == uid && gone.ResourceVersion == rv:
			v.stats.Duplicates++
			return nil, nil
		case held == nil && wasGone && olderRV(rv, gone.ResourceVersion):
			// A late copy of the delete of an earlier object under this
			// key: recording it would lower the version the key was
			// removed at, and let a late copy of a newer event bring
			// the key back.
			v.stats.Stale++
			return nil, problem(ProblemStale, "delete at "+rv+" of uid "+uid+", key removed at "+gone.ResourceVersion)
		case held == nil:
			detail := "no object held at this key"
			if wasGone {
				detail = "uid " + gone.UID + " at " + gone.ResourceVersion + " was removed from this key"
			}
			v.gone[key] = entry{Object: Object{Key: key, UID: uid, ResourceVersion: rv}, partition: v.interned(pos.Partition), seq: v.seq}
			delete(v.pruned, key)
			v.stats.DeletesNotHeld++
			return nil, v.notHeld(Problem{Position: pos, Key: key, ID: ev.ID(), Reason: ProblemNotHeld, Detail: detail})
		case held.UID != uid && olderRV(rv, held.ResourceVersion):
			// A late delete of an earlier object under this key.
			v.stats.Stale++
			return nil, problem(ProblemStale, "delete at "+rv+" of uid "+uid+", view holds uid "+held.UID+" at "+held.ResourceVersion)
		}
		var final *Object
		if j, ref, err := objectJSON(ev.Data(), ext(ev, encoding.ExtPayload) == encoding.PayloadReference); err == nil {
			final = &Object{Key: key, Namespace: held.Namespace, Name: held.Name, UID: uid, ResourceVersion: rv, JSON: j, Reference: ref}
		}
		c := v.remove(pos, held, final, fsu)
		v.gone[key] = entry{Object: Object{Key: key, UID: uid, ResourceVersion: rv}, partition: v.interned(pos.Partition), seq: v.seq}
		return []change{c}, nil
	}

	isRef := ext(ev, encoding.ExtPayload) == encoding.PayloadReference
	prunedAt, wasPruned := v.pruned[key]
	restore := held == nil && wasPruned && sw.start > prunedAt
	switch {
	case held != nil && held.UID == uid && held.ResourceVersion == rv && (isRef || !held.Reference):
		if held.typ == ev.Type() {
			v.stats.Duplicates++
		}
		return nil, nil
	case held != nil && olderRV(rv, held.ResourceVersion):
		v.stats.Stale++
		return nil, problem(ProblemStale, "resourceVersion "+rv+" after "+held.ResourceVersion)
	case held == nil && wasGone && !restore && (gone.UID == uid && gone.ResourceVersion == rv || olderRV(rv, gone.ResourceVersion)):
		v.stats.Stale++
		return nil, problem(ProblemStale, "resourceVersion "+rv+" after a delete at "+gone.ResourceVersion)
	}
	j, ref, err := eventObject(ev, isRef)
	if err != nil {
		return nil, problem(ProblemMalformed, err.Error())
	}
	e := &entry{
		Object: Object{
			Key: key, Namespace: v.interned(ext(ev, encoding.ExtNamespace)), Name: nameOf(key, ext(ev, encoding.ExtName)),
			UID: uid, ResourceVersion: rv, JSON: j, Reference: ref,
		},
		partition: v.interned(pos.Partition), seq: v.seq, typ: ev.Type(),
	}
	v.objects[key] = e
	v.index(e)
	delete(v.gone, key)
	delete(v.pruned, key)
	if restore {
		v.stats.Restored++
	}
	v.stats.Applied++
	if held == nil {
		return []change{{pos: pos, kind: watch.Added, key: key, obj: &e.Object}}, nil
	}
	return []change{{pos: pos, kind: watch.Modified, key: key, old: &held.Object, obj: &e.Object}}, nil
}

// watchGap notes a watch.gap event. It changes no object: the snapshot that
// follows it does.
func (v *View) watchGap(pos Position, ev *event.Event, key string, problem func(reason, detail string) []Problem) []Problem {
	if _, ok := v.watchGaps[ev.ID()]; ok {
		return nil
	}
	var g encoding.Gap
	if err := json.Unmarshal(ev.Data(), &g); err != nil {
		return problem(ProblemMalformed, "gap data: "+err.Error())
	}
	v.watchGaps[ev.ID()] = struct{}{}
	v.stats.WatchGaps++
	WatchGapsTotal.WithLabelValues(key, g.Reason).Inc()
	v.newGaps = append(v.newGaps, WatchGap{Position: pos, ID: ev.ID(), Key: key, Gap: g})
	return nil
}

// notHeld returns p for deliver, which passes it to OnDeleteNotHeld.
func (v *View) notHeld(p Problem) []Problem {
	if v.opt.OnDeleteNotHeld == nil {
		return nil
	}
	return []Problem{p}
}

// index records e under its namespace, replacing what the key held.
func (v *View) index(e *entry) {
	keys := v.byNamespace[e.Namespace]
	if keys == nil {
		keys = map[string]*entry{}
		v.byNamespace[e.Namespace] = keys
	}
	keys[e.Key] = e
}

// unindex forgets e under its namespace.
func (v *View) unindex(e *entry) {
	keys := v.byNamespace[e.Namespace]
	delete(keys, e.Key)
	if len(keys) == 0 {
		delete(v.byNamespace, e.Namespace)
	}
}

// remove deletes held; final is the state the delete carried, if any.
func (v *View) remove(pos Position, held *entry, final *Object, finalStateUnknown bool) change {
	delete(v.objects, held.Key)
	delete(v.pruned, held.Key)
	v.unindex(held)
	v.gone[held.Key] = entry{Object: Object{Key: held.Key, UID: held.UID, ResourceVersion: held.ResourceVersion}, partition: held.partition, seq: v.seq}
	v.stats.Applied++
	if final == nil {
		final = &held.Object
	}
	return change{pos: pos, kind: watch.Deleted, key: held.Key, old: &held.Object, obj: final, finalStateUnknown: finalStateUnknown}
}
