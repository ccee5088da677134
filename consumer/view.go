package consumer

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewire/kubewire/encoding"
)

// Options tune a View. The zero value keeps every resource.
type Options struct {
	// Resource, if set, keeps only the events of one resource: the first
	// segment of their partition key, e.g. "configmaps" or
	// "widgets.demo.kubewire.io". Others are skipped.
	Resource string
	// OnProblem, if set, is called for every event the View ignored or could
	// not apply, after the event was handled. It must not call the View.
	OnProblem func(Problem)
	// OnRead, if set, is called for every message a source read (events of
	// every resource, tombstones, gaps, messages that are not events), in
	// order, before the View applies it. A source commits or acks the
	// message only after OnRead returned. It must not call Apply, Tombstone,
	// Gap or Skip.
	OnRead func(Read)
	// OnDeleteNotHeld, if set, is called for every deleted event of a key
	// the View does not hold (its duplicates excepted), with Reason
	// ProblemNotHeld, after the event was handled. Handlers get no OnDelete
	// for it: as in client-go, they only hear of objects they were given.
	// It is normal when reading did not start at the beginning of the
	// history (a stored position, FromEnd, a topic whose retention or
	// compaction dropped the object's earlier events), and for a delete of
	// a key a snapshot already pruned. It must not call the View.
	OnDeleteNotHeld func(Problem)
	// OnWatchGap, if set, is called for every watch.gap event kubewire sent
	// (once per gap: its copies in other partitions and its repeats are
	// skipped), after the event was handled. The gap says that changes in
	// its range may never have been sent; the View's state is not changed
	// by it, and the snapshot that follows it converges the View. An
	// audit consumer records the range as possibly lost. It must not call
	// the View.
	OnWatchGap func(WatchGap)
}

// WatchGap is a watch.gap event: kubewire could not go on watching a
// resource from where it was, so changes of the resource (in Namespace,
// if set) whose resourceVersion is in (From, To] may be missing from the
// stream. It is not View.Gap, which records events the broker lost.
type WatchGap struct {
	// Position is where the event was read; ID is its id.
	Position Position
	ID       string
	// Key is the resource's partition key, e.g. "configmaps" or
	// "widgets.demo.kubewire.io".
	Key string
	encoding.Gap
}

// View is the state a consumer builds from kubewire's events, by the
// consumer's rule of docs/events.md, applied per resource and per partition
// (a Kafka partition or a JetStream stream):
//
//   - an event whose id was already applied is dropped: for one key, an
//     event with the uid, resourceVersion and type of the object held;
//   - an event never replaces an object of a higher resourceVersion, nor
//     brings back a deleted one at the version it was deleted at or lower;
//   - added, updated and synced put the object at its key; deleted and a
//     Kafka tombstone remove the key;
//   - snapshot.completed removes every key of its resource in its partition
//     that had no event since the matching snapshot.started, unless the
//     marker carries the incomplete extension;
//   - a snapshot window is applied once per partition: once its completed
//     marker was applied, a replay of the window (its markers, its synced
//     records) is skipped, so that a restart that delivers it again neither
//     prunes nor brings back what later events changed;
//   - a synced record of a snapshot that started after a key was pruned
//     brings the key back, even at the version it was pruned at;
//   - a delete of a key the View does not hold changes nothing and is
//     reported to Options.OnDeleteNotHeld and counted in Stats.DeletesNotHeld;
//   - a delete marked finalstateunknown, a key pruned by a snapshot and one
//     removed by a tombstone alone are delivered to handlers as
//     cache.DeletedFinalStateUnknown, as client-go does for deletes noticed
//     by a relist;
//   - a conflated event is applied as any other: it carries the newest state.
//   - a watch.gap event changes nothing (the snapshot that follows it
//     converges the view); it is reported to Options.OnWatchGap, once per
//     gap, and counted in Stats.WatchGaps and WatchGapsTotal.
//
// Apply, Tombstone and Gap may be called from several goroutines (one per
// partition): they are serialised, and handlers are called in that order,
// from the goroutine that applied the event, after the View's lock is
// released. Reads may run at any time.
type View struct {
	opt Options

	// applyMu serialises applying and the notifications that follow, so
	// that handlers see changes in the order they were applied.
	applyMu sync.Mutex

	mu      sync.RWMutex
	objects map[string]*entry
	// byNamespace indexes objects by namespace ("" for cluster-scoped), for
	// ByNamespace. Labels get no index: one would cost more memory than the
	// objects' JSON budget allows.
	byNamespace map[string]map[string]*entry
	// gone remembers deleted keys until a complete snapshot passes them, so
	// that a late copy of an older event does not bring them back.
	gone map[string]entry
	// pruned holds, for the keys of gone that a snapshot pruned, the seq
	// of the prune: a synced record of a window opened after it brings the
	// key back (the prune may have been wrong, say a record lost with no
	// incomplete marker; the newer snapshot lists the object as live).
	pruned  map[string]uint64
	windows map[windowKey]window
	// done holds the snapshot windows whose completed marker was applied
	// (matched or not). A restart can deliver a window again after later
	// events; its markers and records are then skipped. One entry per
	// snapshot and partition: snapshots come every snapshotInterval.
	done map[windowKey]struct{}
	// watchGaps holds the ids of the watch.gap events handled: a gap goes
	// to every partition, and is reported once. One entry per gap.
	watchGaps map[string]struct{}
	// newGaps are the gaps of the event being applied, for deliver.
	newGaps []WatchGap
	pos     Positions
	seq     uint64
	stats   Stats
	intern  map[string]string

	handlers  []handler
	observers []func(change)

	sync syncState
}

// Stats counts what a View did.
type Stats struct {
	// Applied counts events that changed the view.
	Applied int64
	// Duplicates counts events dropped because their id was applied;
	// Stale those dropped because the view held a newer version.
	Duplicates, Stale int64
	// Tombstones counts Kafka tombstones.
	Tombstones int64
	// Pruned counts keys removed by complete snapshots.
	Pruned int64
	// Incomplete counts completed markers that pruned nothing because they
	// carried the incomplete extension; Unmatched those whose started
	// marker was never seen (normal at the start of a compacted topic).
	Incomplete, Unmatched int64
	// Conflated and FinalStateUnknown count events with those extensions.
	Conflated, FinalStateUnknown int64
	// Gaps counts events known to be lost by the broker (see Gap).
	Gaps int64
	// WatchGaps counts the watch.gap events kubewire sent, each once (see
	// Options.OnWatchGap).
	WatchGaps int64
	// Replayed counts snapshot markers and synced records skipped because
	// their snapshot window had already been applied in that partition.
	Replayed int64
	// DeletesNotHeld counts deletes of keys the View did not hold (see
	// Options.OnDeleteNotHeld); Restored the keys a snapshot pruned that a
	// newer snapshot's synced record brought back.
	DeletesNotHeld, Restored int64
	// Problems counts what was reported to Options.OnProblem.
	Problems int64
}

// Problem is an event the View ignored or could not apply.
type Problem struct {
	Position Position
	Key, ID  string
	Reason   string
	Detail   string
}

// Problem reasons.
const (
	// ProblemStale: the event's resourceVersion is lower than the held one.
	ProblemStale = "stale"
	// ProblemMalformed: the event lacks what the contract says it has.
	ProblemMalformed = "malformed"
	// ProblemUnknownType: the event's type is not one of contract version 1.
	ProblemUnknownType = "unknown type"
	// ProblemNotHeld: a delete of a key the View does not hold. It goes to
	// Options.OnDeleteNotHeld, not OnProblem: it is not a fault of the
	// stream.
	ProblemNotHeld = "not held"
)

type windowKey struct{ partition, snapshotID string }

type window struct {
	resource string
	start    uint64
}

// change is one change of the view, for handlers and watches.
type change struct {
	pos  Position
	kind watch.EventType // Added, Modified, Deleted; Error for a gap
	key  string
	// old is the object before, for Modified and Deleted; obj the object
	// after, or for Deleted the final state the event carried.
	old, obj          *Object
	finalStateUnknown bool
	// listed marks an Added of an object taken over with a partition's
	// state, not read: handlers get it with isInInitialList true.
	listed bool
}

// NewView returns an empty View.
func NewView(opt Options) *View {
	return &View{
		opt: opt, objects: map[string]*entry{}, byNamespace: map[string]map[string]*entry{}, gone: map[string]entry{}, pruned: map[string]uint64{}, windows: map[windowKey]window{}, done: map[windowKey]struct{}{}, watchGaps: map[string]struct{}{},
		pos: Positions{}, intern: map[string]string{}, sync: newSyncState(),
	}
}

// resourceOf returns the resource of a partition key: its first segment.
func resourceOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// nameOf returns name, as a slice of the key when the key ends with it, so
// that the View does not hold it twice.
func nameOf(key, name string) string {
	if strings.HasSuffix(key, "/"+name) {
		return key[len(key)-len(name):]
	}
	return name
}

func ext(ev *event.Event, name string) string {
	v, _ := ev.Extensions()[name].(string)
	return v
}

func hasExt(ev *event.Event, name string) bool {
	_, ok := ev.Extensions()[name]
	return ok
}

// Apply applies one event read at pos, and then calls the handlers.
func (v *View) Apply(pos Position, ev *event.Event) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.tap(Read{Kind: ReadEvent, Position: pos, Event: ev, Key: ext(ev, encoding.ExtPartitionKey)})
	v.mu.Lock()
	cs, ps := v.apply(pos, ev)
	v.advance(pos)
	gaps := v.newGaps
	v.newGaps = nil
	v.mu.Unlock()
	v.deliver(cs, ps)
	if v.opt.OnWatchGap != nil {
		for _, g := range gaps {
			v.opt.OnWatchGap(g)
		}
	}
}

// Tombstone applies a Kafka tombstone (a record with a key and no value)
// read at pos. It removes the key: a compacted topic may have dropped the
// deleted event and kept only the tombstone that followed it.
func (v *View) Tombstone(pos Position, key string) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.tap(Read{Kind: ReadTombstone, Position: pos, Key: key})
	v.mu.Lock()
	var cs []change
	if v.opt.Resource == "" || resourceOf(key) == v.opt.Resource {
		v.seq++
		v.stats.Tombstones++
		if held := v.objects[key]; held != nil {
			cs = append(cs, v.remove(pos, held, nil, true))
		}
	}
	v.advance(pos)
	v.mu.Unlock()
	v.deliver(cs, nil)
}

// Gap records that events of a partition were lost before resume, the
// offset reading goes on from (a Kafka offset out of range, a JetStream
// sequence that jumped). The view keeps what it holds, and the next complete
// snapshot removes what was deleted meanwhile; watches of a ListerWatcher end
// with 410 Gone, so that their informers list again.
func (v *View) Gap(partition string, resume int64) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.tap(Read{Kind: ReadGap, Position: Position{Partition: partition, Offset: resume}})
	v.mu.Lock()
	v.stats.Gaps++
	v.pos[v.interned(partition)] = resume
	v.mu.Unlock()
	v.deliver([]change{{pos: Position{Partition: partition, Offset: resume}, kind: watch.Error}}, nil)
}

// advance records that everything up to pos was read.
func (v *View) advance(pos Position) {
	if pos.Offset+1 > v.pos[pos.Partition] {
		v.pos[v.interned(pos.Partition)] = pos.Offset + 1
	}
}

func (v *View) interned(s string) string {
	if i, ok := v.intern[s]; ok {
		return i
	}
	v.intern[s] = s
	return s
}

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

// Stats returns the View's counters.
func (v *View) Stats() Stats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.stats
}

// Position returns, for every partition read, the offset of the next event:
// every event before it has been applied and its handlers have returned.
// A KafkaSource or JetStreamSource can start from it.
func (v *View) Position() Positions {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.positionLocked()
}

func (v *View) positionLocked() Positions {
	p := make(Positions, len(v.pos))
	for k, o := range v.pos {
		p[k] = o
	}
	return p
}

// Skip records that the message at pos could not be read as an event: it
// is reported to OnProblem as malformed and counts as read, so that a source
// commits it rather than reading it forever.
func (v *View) Skip(pos Position, err error) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.tap(Read{Kind: ReadMalformed, Position: pos, Err: err})
	v.mu.Lock()
	v.stats.Problems++
	v.advance(pos)
	v.mu.Unlock()
	v.deliver(nil, []Problem{{Position: pos, Reason: ProblemMalformed, Detail: err.Error()}})
}
