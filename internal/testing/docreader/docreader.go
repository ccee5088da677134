// Package docreader is a second, independent reader of kubewire's event
// stream, written from the documentation without reading package consumer
// (nor the Python example, nor kubewire verify): from docs/events.md alone,
// at revision eebc576 (branch docfix: "the consumer's rule answers what an
// independent reader found ambiguous (issue 41)"; it was first written at
// 2449bfe), and from the vector format of
// testdata/consumer-vectors/README.md at that same revision. Its only purpose is to show that
// the document is enough to rebuild the state the vectors expect: where it
// needed a reading the document does not spell out, a comment says so at
// that spot and names the choice.
//
// It is test-only: nothing that ships imports it.
package docreader

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The CloudEvents types of the contract ("Attributes", "Types").
const (
	typeAdded     = "io.kubewire.object.added"
	typeUpdated   = "io.kubewire.object.updated"
	typeDeleted   = "io.kubewire.object.deleted"
	typeSynced    = "io.kubewire.object.synced"
	typeStarted   = "io.kubewire.snapshot.started"
	typeCompleted = "io.kubewire.snapshot.completed"
	typeGap       = "io.kubewire.watch.gap"
	typeRemoved   = "io.kubewire.resource.removed"
)

// Record is one record read from a partition: a CloudEvent in the
// structured JSON format, or, when Event is nil, a Kafka tombstone of
// the key Tombstone.
type Record struct {
	Partition string
	Offset    uint64 // the record's position in Partition
	Event     json.RawMessage
	Tombstone string
}

// Object is one key of the final state, in the form of the vectors'
// expected files.
type Object struct {
	Key             string `json:"key"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// Problem is a record the reader reported: one that breaks the contract
// (step 1) or a snapshot.completed whose started was never read (K1).
type Problem struct {
	Partition string
	Offset    uint64
	Reason    string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s@%d: %s", p.Partition, p.Offset, p.Reason)
}

// entry is the state of one key: held (an object) or gone (removed).
type entry struct {
	resource  string // the key's first segment, to match windows, gaps and removals
	namespace string // the namespace extension of the event that set it, to match gaps

	held      bool
	uid       string
	version   uint64
	rv        string // version as the record wrote it
	typ       string // type of the event that set a held entry
	reference bool   // a held entry set by a reference event (a skeleton)
	object    json.RawMessage

	part     string
	seen     uint64
	forgot   uint64
	pruned   uint64 // gone only
	skipTomb *string
	sid      *string   // held only: the last snapshot that listed it in part
	listed   []listing // snapshots that listed it in another partition than part
}

// listing is one element of an entry's `listed`: snapshot s listed the key
// in partition Q.
type listing struct {
	snapshot, partition string
}

type window struct {
	partition, id string
}

type openWindow struct {
	resource string
	start    uint64
}

// doneWindow is a window of `done`, "with that same seq" (its started's).
// A completed marker whose started was never read (K1) puts a window in
// done that has no started, hence no seq: hasStart is false.
type doneWindow struct {
	start    uint64
	hasStart bool
}

// Reader keeps the state the consumer's rule says a consumer keeps, for
// one consumer of one topic or stream set. The zero value is not ready;
// use New. A Reader is not safe for concurrent use.
type Reader struct {
	next     map[string]uint64 // next[P]: the position after the last record read from P
	seq      uint64
	entries  map[string]*entry
	open     map[window]openWindow
	done     map[window]doneWindow
	gaps     map[string]bool // gap ids reported once
	problems []Problem
}

// New returns a Reader that has read nothing.
func New() *Reader {
	return &Reader{
		next:    map[string]uint64{},
		entries: map[string]*entry{},
		open:    map[window]openWindow{},
		done:    map[window]doneWindow{},
		gaps:    map[string]bool{},
	}
}

// Problems returns the records reported so far, in the order read.
func (r *Reader) Problems() []Problem { return append([]Problem(nil), r.problems...) }

// Gaps returns the ids of the gaps read, each once, sorted.
func (r *Reader) Gaps() []string {
	ids := make([]string, 0, len(r.gaps))
	for id := range r.gaps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// State returns the objects held, sorted by key.
func (r *Reader) State() []Object {
	out := []Object{}
	for k, e := range r.entries {
		if e.held {
			out = append(out, Object{Key: k, UID: e.uid, ResourceVersion: e.rv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (r *Reader) report(rec Record, format string, args ...any) {
	r.problems = append(r.problems, Problem{rec.Partition, rec.Offset, fmt.Sprintf(format, args...)})
}

// ParseVersion reads a version: a decimal unsigned integer of at most
// 2^64−1, with no sign, space or fraction ("Versions").
//
// The document does not say whether leading zeros ("007") are allowed; it
// says "decimal unsigned integer", which "007" is, so they are accepted and
// compared as numbers.
func ParseVersion(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// event is the part of a CloudEvent the rule reads.
type event struct {
	SpecVersion  string          `json:"specversion"`
	ID           string          `json:"id"`
	Source       string          `json:"source"`
	Type         string          `json:"type"`
	PartitionKey *string         `json:"partitionkey"`
	UID          string          `json:"uid"`
	RV           *string         `json:"resourceversion"`
	SnapshotID   string          `json:"snapshotid"`
	Namespace    string          `json:"namespace"`
	Incomplete   *string         `json:"incomplete"`
	Payload      string          `json:"payload"`
	Data         json.RawMessage `json:"data"`
}

// resourceOf is the `<resource>[.<group>]` part of a partition key: a key
// of an object starts with it, and a marker's or gap's key is just it.
//
// The document never says how to tell which resource an entry belongs to
// (K2: "every entry E of the window's resource"; G: "every entry E of the
// gap's resource"). This reader takes the partition key's first segment for
// entries and the whole partition key for markers and gaps, which also
// holds for keyBy: involvedObject ("events/Pod/shop/web-1").
func resourceOf(key string) string {
	res, _, _ := strings.Cut(key, "/")
	return res
}

// Read handles one record by the consumer's rule.
func (r *Reader) Read(rec Record) {
	// Step 0: a position already read is skipped, whatever the record.
	if n, ok := r.next[rec.Partition]; ok && rec.Offset < n {
		return
	}
	r.next[rec.Partition] = rec.Offset + 1

	if rec.Event == nil {
		// Step 1: "A Kafka tombstone goes to step T." Whether it passes
		// step 2's "seq = seq + 1" on its way is not said; `seq` is "+1 for
		// every record handled below (steps 0 and 1 excepted)", and T is
		// below, so it takes a seq. (Only the seen that T sets reads it.)
		r.seq++
		r.tombstone(rec)
		return
	}

	// Step 1: records that break the contract.
	var ev event
	if err := json.Unmarshal(rec.Event, &ev); err != nil {
		r.report(rec, "not a CloudEvent: %v", err)
		return
	}
	// "Not a CloudEvent" is read as: the four attributes CloudEvents 1.0
	// requires (specversion 1.0, id, source, type) are not all there.
	if ev.SpecVersion != "1.0" || ev.ID == "" || ev.Source == "" || ev.Type == "" {
		r.report(rec, "not a CloudEvent 1.0 (specversion, id, source or type missing)")
		return
	}
	if ev.PartitionKey == nil || *ev.PartitionKey == "" {
		r.report(rec, "event %s has no partitionkey", ev.ID)
		return
	}
	// Step 1: "That is the whole list: a record with another attribute
	// missing (a uid, say) is applied as it is": an empty uid or snapshot
	// id is applied as one.
	switch ev.Type {
	case typeAdded, typeUpdated, typeSynced, typeDeleted:
		if ev.RV == nil {
			r.report(rec, "object event %s has no resourceversion", ev.ID)
			return
		}
		v, ok := ParseVersion(*ev.RV)
		if !ok {
			r.report(rec, "object event %s: resourceversion %q is not a version", ev.ID, *ev.RV)
			return
		}
		r.seq++
		r.object(rec, ev, v)
	case typeStarted:
		r.seq++
		r.started(rec, ev)
	case typeCompleted:
		r.seq++
		r.completed(rec, ev)
	case typeGap:
		var g struct {
			Namespace string  `json:"namespace"`
			From      *string `json:"from"`
			To        *string `json:"to"`
		}
		if err := json.Unmarshal(ev.Data, &g); err != nil || g.From == nil || g.To == nil {
			r.report(rec, "gap %s: data cannot be read", ev.ID)
			return
		}
		if _, ok := ParseVersion(*g.From); !ok {
			r.report(rec, "gap %s: from %q is not a version", ev.ID, *g.From)
			return
		}
		if _, ok := ParseVersion(*g.To); !ok {
			r.report(rec, "gap %s: to %q is not a version", ev.ID, *g.To)
			return
		}
		r.seq++
		// G: "watch.gap whose data names namespace n (or none)".
		r.gap(rec, ev, g.Namespace)
	case typeRemoved:
		r.seq++
		r.removed(rec, ev)
	default:
		r.report(rec, "event %s has an unknown type %q", ev.ID, ev.Type)
	}
}

func (r *Reader) object(rec Record, ev event, v uint64) {
	P := rec.Partition
	k := *ev.PartitionKey
	E := r.entries[k]

	// O1: an object event of the key's partition is an event of its key,
	// even one skipped; one of another partition counts only if it sets E
	// (every step that sets E sets seen below).
	if E != nil && E.part == P {
		E.seen = r.seq
	}

	// No ids are kept: "Do not drop events by id alone" ("Ordering and
	// delivery").

	// O2: a synced record of a window already applied is skipped.
	w := window{P, ev.SnapshotID}
	if _, done := r.done[w]; ev.Type == typeSynced && done {
		return
	}
	var start uint64
	if o, ok := r.open[w]; ok && ev.Type == typeSynced {
		start = o.start
	}

	// O3.
	forgot := E != nil && E.forgot > 0 && E.part == P && (ev.Type != typeSynced || start > E.forgot)
	older := func(x uint64) bool { return !forgot && v < x }

	// "When a step below makes E held or gone, seen = seq, forgot = 0,
	// pruned = 0, skipTomb and sid none, and listed stays".
	set := func(held bool) *entry {
		var listed []listing
		if E != nil {
			listed = E.listed
		}
		n := &entry{
			listed:    listed,
			resource:  resourceOf(k),
			namespace: ev.Namespace,
			held:      held,
			uid:       ev.UID,
			version:   v,
			rv:        *ev.RV,
			part:      P,
			seen:      r.seq,
		}
		if held {
			n.typ = ev.Type
			n.object = ev.Data
			n.reference = ev.Payload == "reference"
			if ev.Type == typeSynced { // O5.4: "for a synced record sid = s"
				sid := ev.SnapshotID
				n.sid = &sid
			}
		}
		r.entries[k] = n
		return n
	}

	if ev.Type == typeDeleted {
		switch {
		case E != nil && !E.held && E.uid == ev.UID && E.version == v: // O4.1
		case E != nil && !E.held && older(E.version): // O4.2
		case E == nil || !E.held: // O4.3
			set(false)
		case E.uid != ev.UID && older(E.version): // O4.4
			p := P
			E.skipTomb = &p
		default: // O4.5, read literally: it also removes an object of
			// the same uid held at a higher version (O4.4 names only
			// "another uid").
			set(false)
		}
		return
	}

	// O5.0.
	if ev.Type == typeSynced && E != nil && E.held && v <= E.version {
		if E.part == P {
			sid := ev.SnapshotID
			E.sid = &sid
		} else {
			E.addListed(listing{ev.SnapshotID, P})
		}
	}

	switch {
	case E != nil && E.held && E.uid == ev.UID && E.version == v: // O5.1
		if E.reference && ev.Payload != "reference" {
			E.object, E.reference, E.typ = ev.Data, false, ev.Type
		}
	case E != nil && E.held && older(E.version): // O5.2
	case E != nil && !E.held && !forgot && (v < E.version || (E.uid == ev.UID && v == E.version)) &&
		!(ev.Type == typeSynced && E.pruned > 0 &&
			((P == E.part && start > E.pruned) || (P != E.part && v >= E.version))): // O5.3
	default: // O5.4
		set(true)
	}
}

func (r *Reader) started(rec Record, ev event) {
	w := window{rec.Partition, ev.SnapshotID}
	if _, ok := r.done[w]; ok {
		return
	}
	if _, ok := r.open[w]; ok {
		return
	}
	r.open[w] = openWindow{resource: *ev.PartitionKey, start: r.seq}
}

// windowStart is the seq of Q's window of s, open or done, if it has one.
func (r *Reader) windowStart(Q, s string) (uint64, bool) {
	if o, ok := r.open[window{Q, s}]; ok {
		return o.start, true
	}
	d, ok := r.done[window{Q, s}]
	return d.start, ok && d.hasStart
}

func (r *Reader) completed(rec Record, ev event) {
	P := rec.Partition
	s := ev.SnapshotID
	w := window{P, s}
	// K1.
	if _, ok := r.done[w]; ok {
		return
	}
	o, ok := r.open[w]
	r.done[w] = doneWindow{start: o.start, hasStart: ok}
	if !ok {
		r.report(rec, "snapshot.completed of %q whose started was never read in %s", s, P)
		return
	}
	delete(r.open, w)
	if ev.Incomplete != nil {
		return
	}
	// K2.
	for k, E := range r.entries {
		if E.resource != o.resource || E.part != P || E.seen >= o.start {
			continue
		}
		if !E.held {
			delete(r.entries, k)
			continue
		}
		// "it stays if E.listed has (s, Q) for this snapshot s, or (s', Q)
		// where Q's window of s started before Q's window of s'". When Q
		// has no window of s (it was added after s started there, or s's
		// started was never read in Q), the two cannot be ordered and
		// (s', Q) does not spare k: the closing paragraph of the rule says
		// so ("it has no window of s, so a record of a later snapshot
		// there cannot be ordered against s, and k's old partition's
		// window of s prunes k").
		stays := false
		kept := E.listed[:0:0]
		for _, l := range E.listed {
			if l.snapshot == s {
				stays = true
				continue // "remove (s, ·) from E.listed either way"
			}
			kept = append(kept, l)
			if qs, ok := r.windowStart(l.partition, s); ok {
				if qs2, ok := r.windowStart(l.partition, l.snapshot); ok && qs < qs2 {
					stays = true
				}
			}
		}
		E.listed = kept
		if stays {
			continue
		}
		// Gone at its uid and version, pruned = seq, keeping forgot;
		// listed stays.
		E.held, E.object, E.typ, E.reference = false, nil, "", false
		E.seen, E.pruned, E.skipTomb, E.sid = r.seq, r.seq, nil, nil
	}
}

func (r *Reader) gap(rec Record, ev event, ns string) {
	// G. The gap's id is reported once; every copy forgets.
	r.gaps[ev.ID] = true
	res := *ev.PartitionKey
	for _, E := range r.entries {
		if E.resource != res || E.part != rec.Partition {
			continue
		}
		if ns != "" && E.namespace != ns {
			continue
		}
		E.forgot = r.seq
	}
}

// removed handles a resource.removed: every held entry of its resource
// with E.part = P becomes gone at its uid and version; P's open windows of
// that resource are dropped (neither open nor done: the rule does not put
// them in done).
//
// "When a step below makes E held or gone, seen = seq, forgot = 0, pruned
// = 0 ... unless it says otherwise": this step says nothing otherwise, so
// unlike T and K2 it does not keep forgot.
func (r *Reader) removed(rec Record, ev event) {
	P := rec.Partition
	res := *ev.PartitionKey
	for _, E := range r.entries {
		if E.resource != res || E.part != P || !E.held {
			continue
		}
		E.held, E.object, E.typ, E.reference = false, nil, "", false
		E.seen, E.forgot, E.pruned, E.skipTomb, E.sid = r.seq, 0, 0, nil, nil
	}
	for w, o := range r.open {
		if w.partition == P && o.resource == res {
			delete(r.open, w)
		}
	}
}

func (r *Reader) tombstone(rec Record) {
	E := r.entries[rec.Tombstone]
	if E == nil {
		return
	}
	P := rec.Partition
	skip := E.skipTomb != nil && *E.skipTomb == P
	if E.held && E.part == P && !skip {
		// T: gone at its uid and version, keeping forgot; by the rule's
		// general sentence ("When a step below makes E held or gone, seen
		// = seq ... pruned = 0, skipTomb and sid none") the tombstone also
		// sets seen. A tombstone that removes nothing changes nothing,
		// seen included (T).
		E.held, E.object, E.typ, E.reference = false, nil, "", false
		E.seen, E.pruned, E.skipTomb, E.sid = r.seq, 0, nil, nil
		return
	}
	if skip {
		E.skipTomb = nil
	}
}

// addListed adds l to E.listed, once.
func (E *entry) addListed(l listing) {
	for _, x := range E.listed {
		if x == l {
			return
		}
	}
	E.listed = append(E.listed, l)
}
