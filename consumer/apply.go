package consumer

import (
	"encoding/json"
	"slices"

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
		return v.complete(pos, ev, key, problem)
	case encoding.TypeGap:
		return nil, v.watchGap(pos, ev, key, problem)
	case encoding.TypeRemoved:
		return v.removed(pos, key), nil
	case encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeSynced, encoding.TypeDeleted:
	default:
		return nil, problem(ProblemUnknownType, ev.Type())
	}

	uid, rv := ext(ev, encoding.ExtUID), ext(ev, encoding.ExtResourceVersion)
	// A record the View cannot order is not applied, and does not count
	// as an event of its key.
	if rv == "" {
		return nil, problem(ProblemMalformed, "no resourceversion")
	}
	if _, err := version(rv); err != nil {
		return nil, problem(ProblemMalformed, "resourceversion "+err.Error())
	}
	if hasExt(ev, encoding.ExtConflated) {
		v.stats.Conflated++
	}
	// Every record of the key in its partition counts as an event of the
	// key for the prune, even one dropped below (a duplicate, a stale
	// copy, a record of a window already applied). One of another
	// partition counts only if it sets the key: after the topic grew, a
	// stale record of the key's old partition says nothing of whether
	// the key is live.
	held := v.objects[key]
	if held != nil && held.partition == pos.Partition {
		held.seq = v.seq
	}
	gone, wasGone := v.gone[key]
	if wasGone && gone.partition == pos.Partition {
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

	// After a watch.gap of its scope the View forgot the key's version
	// (see forget): the next change, or a record of a snapshot opened
	// after the gap, read from the partition that forgot, is not compared
	// with it. Another partition's records are compared: that partition's
	// own copy of the gap has not come yet, and until it does they are of
	// the history before.
	var forgot bool
	switch {
	case held != nil:
		forgot = held.forgot != 0 && held.partition == pos.Partition && (ev.Type() != encoding.TypeSynced || sw.start > held.forgot)
	case wasGone:
		forgot = gone.forgot != 0 && gone.partition == pos.Partition && (ev.Type() != encoding.TypeSynced || sw.start > gone.forgot)
	}
	older := func(than string) bool { return !forgot && olderRV(rv, than) }

	if ev.Type() == encoding.TypeDeleted {
		fsu := hasExt(ev, encoding.ExtFinalStateUnknown)
		if fsu {
			v.stats.FinalStateUnknown++
		}
		switch {
		case held == nil && wasGone && gone.UID == uid && gone.ResourceVersion == rv:
			v.stats.Duplicates++
			return nil, nil
		case held == nil && wasGone && older(gone.ResourceVersion):
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
			v.gone[key] = entry{Object: Object{Key: key, Namespace: v.interned(ext(ev, encoding.ExtNamespace)), UID: uid, ResourceVersion: rv},
				partition: v.interned(pos.Partition), seq: v.seq}
			delete(v.pruned, key)
			v.stats.DeletesNotHeld++
			return nil, v.notHeld(Problem{Position: pos, Key: key, ID: ev.ID(), Reason: ProblemNotHeld, Detail: detail})
		case held.UID != uid && older(held.ResourceVersion):
			// A late delete of an earlier object under this key; the
			// tombstone written after it in its partition is as late.
			held.skipTomb = v.interned(pos.Partition)
			v.stats.Stale++
			return nil, problem(ProblemStale, "delete at "+rv+" of uid "+uid+", view holds uid "+held.UID+" at "+held.ResourceVersion)
		}
		var final *Object
		if j, ref, err := objectJSON(ev.Data(), ext(ev, encoding.ExtPayload) == encoding.PayloadReference); err == nil {
			final = &Object{Key: key, Namespace: held.Namespace, Name: held.Name, UID: uid, ResourceVersion: rv, JSON: j, Reference: ref}
		}
		c := v.remove(pos, held, final, fsu)
		v.gone[key] = entry{Object: Object{Key: key, Namespace: held.Namespace, UID: uid, ResourceVersion: rv}, partition: v.interned(pos.Partition), seq: v.seq}
		return []change{c}, nil
	}

	isRef := ext(ev, encoding.ExtPayload) == encoding.PayloadReference
	prunedAt, wasPruned := v.pruned[key]
	// A synced record restores a pruned key when its snapshot started
	// after the prune, or when it comes from another partition than the
	// one whose snapshot pruned the key, at a version not below: a window
	// prunes only its own partition's keys, and after the topic grew the
	// key's records arrive in another.
	restore := held == nil && wasPruned && ev.Type() == encoding.TypeSynced &&
		(gone.partition == pos.Partition && sw.start > prunedAt || gone.partition != pos.Partition && !olderRV(rv, gone.ResourceVersion))
	if held != nil && ev.Type() == encoding.TypeSynced && !olderRV(held.ResourceVersion, rv) {
		sid := v.interned(ext(ev, encoding.ExtSnapshotID))
		if held.partition == pos.Partition {
			// The newest snapshot that listed it in its partition, for a
			// hand-over of that partition (see adopt).
			held.sid = sid
		} else {
			// A snapshot listed the key in another partition than the
			// one that set it (the topic grew): that snapshot's window
			// in the key's partition must not prune it (see complete).
			held.listed = listedToo(held.listed, listing{sid, v.interned(pos.Partition)})
		}
	}
	switch {
	case held != nil && held.UID == uid && held.ResourceVersion == rv && (isRef || !held.Reference):
		if held.typ == ev.Type() {
			v.stats.Duplicates++
		}
		return nil, nil
	case held != nil && older(held.ResourceVersion):
		v.stats.Stale++
		return nil, problem(ProblemStale, "resourceVersion "+rv+" after "+held.ResourceVersion)
	case held == nil && wasGone && !restore && !forgot && (gone.UID == uid && gone.ResourceVersion == rv || olderRV(rv, gone.ResourceVersion)):
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
		partition: v.interned(pos.Partition), seq: v.seq, typ: ev.Type(), sid: v.interned(ext(ev, encoding.ExtSnapshotID)),
	}
	// What snapshots listed the key elsewhere stays true of the key
	// whichever partition sets it now.
	switch {
	case held != nil:
		e.listed = held.listed
	case wasGone:
		e.listed = gone.listed
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
	var g encoding.Gap
	if err := json.Unmarshal(ev.Data(), &g); err != nil {
		return problem(ProblemMalformed, "gap data: "+err.Error())
	}
	if _, err := version(g.From); err != nil {
		return problem(ProblemMalformed, "gap from "+err.Error())
	}
	if _, err := version(g.To); err != nil {
		return problem(ProblemMalformed, "gap to "+err.Error())
	}
	// Every copy forgets, its repeats too: each partition forgets the
	// keys it carries, at its own copy.
	v.forget(pos.Partition, key, g.Namespace)
	if _, ok := v.watchGaps[ev.ID()]; ok {
		return nil
	}
	v.watchGaps[ev.ID()] = struct{}{}
	v.stats.WatchGaps++
	WatchGapsTotal.WithLabelValues(key, g.Reason).Inc()
	v.newGaps = append(v.newGaps, WatchGap{Position: pos, ID: ev.ID(), Key: key, Gap: g})
	return nil
}

// forget makes the View forget the versions it remembers of the keys of
// resource (in namespace, if the gap names one) whose events arrive in
// partition, at that partition's copy of a watch.gap: after an etcd
// restore, of either style, objects come back at versions older than
// those held, and the snapshot after the gap gives the current state.
// What each key holds, and the event that set it, stay: a copy of that
// event is still a duplicate.
func (v *View) forget(partition, resource, namespace string) {
	in := func(e *entry) bool {
		return e.partition == partition && resourceOf(e.Key) == resource && (namespace == "" || e.Namespace == namespace)
	}
	for _, e := range v.objects {
		if in(e) {
			e.forgot = v.seq
		}
	}
	for k, g := range v.gone {
		if in(&g) {
			g.forgot = v.seq
			v.gone[k] = g
		}
	}
}

// maxListed bounds what an entry remembers of the snapshots that listed it
// in another partition: a snapshot leaves the list when its window in the
// key's partition completes, so only a snapshot whose window there never
// comes (one that started before the topic grew) lingers.
const maxListed = 8

// listedToo adds l to listed, dropping the oldest beyond maxListed.
func listedToo(listed []listing, l listing) []listing {
	if slices.Contains(listed, l) {
		return listed
	}
	listed = append(slices.Clone(listed), l)
	if len(listed) > maxListed {
		listed = listed[len(listed)-maxListed:]
	}
	return listed
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
	v.gone[held.Key] = entry{Object: Object{Key: held.Key, Namespace: held.Namespace, UID: held.UID, ResourceVersion: held.ResourceVersion},
		partition: held.partition, seq: v.seq, forgot: held.forgot, listed: held.listed}
	v.stats.Applied++
	if final == nil {
		final = &held.Object
	}
	return change{pos: pos, kind: watch.Deleted, key: held.Key, old: &held.Object, obj: final, finalStateUnknown: finalStateUnknown}
}
