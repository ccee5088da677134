package consumer

import (
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
	// its range may never have been sent; the View's objects are not
	// changed by it (it forgets versions, see View), and the snapshot that
	// follows it converges the View. An
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
//   - a record read again at a position of its partition already applied
//     is skipped whole, and counted in Stats.Reread;
//   - added, updated and synced put the object at its key; deleted
//     removes it; a Kafka tombstone removes it only when the object was
//     set by an event of the tombstone's partition, and not after a delete
//     the View did not apply (after the topic grew, an object of another
//     partition came after the delete the tombstone follows);
//   - a partition handed over by a consumer group keeps, for each key the
//     View already knows from another partition, the newer version, a
//     delete counting as one;
//   - snapshot.completed removes every key of its resource in its partition
//     that had no event in that partition since the matching
//     snapshot.started, unless the marker carries the incomplete extension;
//     a key that this snapshot, or a later one, listed in another
//     partition stays (the topic grew, and the key lives there now);
//   - a snapshot window is applied once per partition: once its completed
//     marker was applied, a replay of the window (its markers, its synced
//     records) is skipped, so that a restart that delivers it again neither
//     prunes nor brings back what later events changed;
//   - a synced record of a snapshot that started after a key was pruned
//     brings the key back, even at the version it was pruned at, and so
//     does one, at that version or above, from another partition than the
//     one whose snapshot pruned it;
//   - a delete of a key the View does not hold changes nothing and is
//     reported to Options.OnDeleteNotHeld and counted in Stats.DeletesNotHeld;
//   - a delete marked finalstateunknown, a key pruned by a snapshot and one
//     removed by a tombstone alone are delivered to handlers as
//     cache.DeletedFinalStateUnknown, as client-go does for deletes noticed
//     by a relist;
//   - a conflated event is applied as any other: it carries the newest state;
//   - a record that breaks the contract (an object event with no
//     resourceversion or one that is not a decimal unsigned integer, a gap
//     whose from or to is not one) is not applied, and is reported to
//     Options.OnProblem as malformed; a snapshot.completed whose started
//     marker the partition never brought prunes nothing and is reported
//     as unmatched;
//   - a watch.gap event changes no object (the snapshot that follows it
//     converges the view); it is reported to Options.OnWatchGap, once per
//     gap, and counted in Stats.WatchGaps and WatchGapsTotal. At each
//     partition's copy the View forgets the versions of the keys of the
//     gap's scope that the partition carries: their next change, or record
//     of a snapshot opened after the gap, is taken whatever its version.
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
	// (matched or not). The value is the seq of the window's started marker
	// (of its completed, if unmatched), which orders it among its
	// partition's windows. A restart can deliver a window again after later
	// events; its markers and records are then skipped. One entry per
	// snapshot and partition: snapshots come every snapshotInterval.
	done map[windowKey]uint64
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
	// Reread counts records read again at a position of their partition
	// the View had already applied (a redelivery by the broker, a restart
	// from a position older than the View's): they are skipped whole.
	Reread int64
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
	// ProblemMalformed: the event lacks what the contract says it has, or
	// has it in another form: a resourceversion, or a gap's from or to,
	// that is not a decimal unsigned integer, say. It is not applied.
	ProblemMalformed = "malformed"
	// ProblemUnknownType: the event's type is not one of contract version 1.
	ProblemUnknownType = "unknown type"
	// ProblemUnmatched: a snapshot.completed whose snapshot.started the
	// partition never brought. It prunes nothing. It is normal when
	// reading began inside the window (a stored position, FromEnd, a
	// compacted topic); it is also counted in Stats.Unmatched.
	ProblemUnmatched = "unmatched"
	// ProblemNotHeld: a delete of a key the View does not hold. It goes to
	// Options.OnDeleteNotHeld, not OnProblem: it is not a fault of the
	// stream.
	ProblemNotHeld = "not held"
)

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
		opt: opt, objects: map[string]*entry{}, byNamespace: map[string]map[string]*entry{}, gone: map[string]entry{}, pruned: map[string]uint64{}, windows: map[windowKey]window{}, done: map[windowKey]uint64{}, watchGaps: map[string]struct{}{},
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
	if v.reread(pos) {
		v.mu.Unlock()
		return
	}
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
	if v.reread(pos) {
		v.mu.Unlock()
		return
	}
	var cs []change
	if v.opt.Resource == "" || resourceOf(key) == v.opt.Resource {
		v.seq++
		v.stats.Tombstones++
		// A tombstone has no version: it removes only an object its
		// own partition set, which is not newer than the delete it
		// follows. An object another partition set came after that
		// delete (the topic grew, and the key's events moved), or its
		// delete was compacted away; a snapshot of the key's partition
		// settles that.
		switch held := v.objects[key]; {
		case held == nil || held.partition != pos.Partition:
		case held.skipTomb == pos.Partition:
			held.skipTomb = ""
		default:
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

// reread reports whether pos was applied already, and counts it: what it
// did is in the View, and everything after it too. Applying it again
// would measure a snapshot window from a replayed started marker, or bring
// back, as the newest of its key, an event from before a watch.gap.
func (v *View) reread(pos Position) bool {
	next, ok := v.pos[pos.Partition]
	if ok && pos.Offset < next {
		v.stats.Reread++
		return true
	}
	return false
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
