package consumer_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// This file checks issue 29: the View converges on every stream of the
// grammar of docs/events.md, "What a consumer can see". A generator plays a
// random history of one resource's objects, writes the clean stream
// kubewire would emit for it, perturbs that stream as brokers, restarts and
// kubewire's own queue do, and the View must end with the cluster's true
// state. Hand-picked streams of the same kind live in
// testdata/consumer-vectors, so that other consumers can be held to them.

// propertySeed is fixed so that a failure is reproducible from the log.
const propertySeed = 29

// rec is one event of a generated stream, kept as fields rather than a
// CloudEvent so that perturbations can drop, copy and mark it cheaply.
type rec struct {
	Type       string
	Key        string // partition key; for markers, the resource
	UID        string
	RV         int
	SID        string // snapshot id, for synced records and markers
	Count      int    // records enqueued, for completed
	Conflated  int    // changes this event stands for, if conflated
	Incomplete int    // records not delivered, if the window is incomplete
	// From and RV are a gap's range (From, RV], Reason its reason;
	// Backwards says the versions went backwards (RV < From).
	From      int
	Reason    string
	Backwards bool
	// Part is the partition the record is read from, "" for p0; for a
	// hand-over, the partition handed over.
	Part string
	// Reread says the record is read again at At, the position it was
	// first read at (a redelivery by the broker); otherwise it is read at
	// its partition's next position.
	Reread bool
	At     int64
}

const (
	tAdded, tUpdated, tDeleted, tSynced = encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeDeleted, encoding.TypeSynced
	tStarted, tCompleted                = encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted
	tGap                                = encoding.TypeGap
	tRemoved                            = encoding.TypeRemoved
	// tTombstone is a Kafka tombstone of Key; tHandover hands Part over
	// from another member of the group (see vectorformat_test.go).
	tTombstone, tHandover = "tombstone", "handover"
	// tRestart saves the consumer's state and loads it into a new
	// consumer, which reads on; vectors do not carry it, as a restart
	// from a saved state changes nothing by the rule.
	tRestart       = "restart"
	vectorResource = "configmaps"
)

func (r rec) marker() bool { return r.Type == tStarted || r.Type == tCompleted }
func (r rec) live() bool   { return r.Type == tAdded || r.Type == tUpdated || r.Type == tDeleted }

// id is the id kubewire gives the event (docs/events.md, "Event ids").
func (r rec) id() string {
	op := r.Type[strings.LastIndexByte(r.Type, '.')+1:]
	switch {
	case r.Type == tGap:
		return r.Key + "/gap/" + strconv.Itoa(r.From) + "-" + strconv.Itoa(r.RV)
	case r.Type == tRemoved:
		return r.Key + "/removed/" + r.UID
	case r.marker():
		return r.SID + "/" + op
	case r.Type == tSynced:
		return r.UID + "/" + strconv.Itoa(r.RV) + "/synced/" + r.SID
	}
	return r.UID + "/" + strconv.Itoa(r.RV) + "/" + op
}

// event builds the CloudEvent kubewire would write for r.
func (r rec) event() *event.Event {
	e := event.New()
	e.SetType(r.Type)
	e.SetSource("/clusters/c/api/v1/" + vectorResource)
	e.SetID(r.id())
	e.SetExtension(encoding.ExtPartitionKey, r.Key)
	if r.SID != "" {
		e.SetExtension(encoding.ExtSnapshotID, r.SID)
	}
	if r.Type == tGap {
		data := map[string]any{"group": "", "version": "v1", "resource": vectorResource,
			"from": strconv.Itoa(r.From), "to": strconv.Itoa(r.RV), "reason": r.Reason}
		if r.Backwards {
			data["backwards"] = true
		}
		_ = e.SetData(event.ApplicationJSON, data)
		return &e
	}
	if r.Type == tRemoved {
		_ = e.SetData(event.ApplicationJSON, map[string]any{"group": "", "version": "v1", "resource": vectorResource, "uid": r.UID})
		return &e
	}
	if r.marker() {
		data := map[string]any{"snapshotId": r.SID, "group": "", "version": "v1", "resource": vectorResource}
		if r.Type == tCompleted {
			data["count"] = r.Count
		}
		if r.Incomplete > 0 {
			e.SetExtension(encoding.ExtIncomplete, strconv.Itoa(r.Incomplete))
		}
		_ = e.SetData(event.ApplicationJSON, data)
		return &e
	}
	name := r.Key[strings.LastIndexByte(r.Key, '/')+1:]
	rv := strconv.Itoa(r.RV)
	e.SetSubject("ns/" + name)
	e.SetExtension(encoding.ExtNamespace, "ns")
	e.SetExtension(encoding.ExtName, name)
	e.SetExtension(encoding.ExtUID, r.UID)
	e.SetExtension(encoding.ExtResourceVersion, rv)
	if r.Conflated > 0 {
		e.SetExtension(encoding.ExtConflated, strconv.Itoa(r.Conflated))
	}
	_ = e.SetData(event.ApplicationJSON, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
		"name": name, "namespace": "ns", "uid": r.UID, "resourceVersion": rv,
	}})
	return &e
}

// held is one object of a final state, the form of the vectors' .json files.
type heldObject struct {
	Key             string `json:"key"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// op is one change of the cluster, a snapshot window during which the
// changes of During happen, a watch gap, a backup of etcd, or partitions
// added to the topic. Ops that no longer make sense after shrinking
// removed others (an update of a key not live, a restore with no backup)
// are skipped.
type op struct {
	Kind   byte // 'c'reate, 'u'pdate, 'd'elete, 'w'indow, 'g'ap, 'b'ackup, 'p'artitions added
	Key    int
	Seed   uint64 // a window's order of records and of its changes
	During []op   // for a window, changes during it; for a gap, changes lost in it
	// Gap is a gap's kind: expired and config-changed lose the changes
	// of During; backwards and bumped restore the last backup (etcd
	// restored plainly, or with its revisions bumped).
	Gap string
	// N is the number of partitions added.
	N int
}

// gapKinds are the gaps the generator plays, the reasons of docs/events.md
// and the two styles of restore.
var gapKinds = []string{"expired", "config-changed", "backwards", "bumped"}

// pert is one perturbation of the clean stream, drawn from its own seed so
// that removing another one while shrinking leaves it as it was.
type pert struct {
	Kind string
	Seed uint64
}

// The perturbation kinds of docs/events.md. Losses come first: a
// redelivery repeats what the broker holds, losses included. Redeliveries
// come after the perturbations that add records, since they name
// positions; hand-overs, restarts and the order in which the partitions
// are read come last.
var pertKinds = []string{"conflated", "incomplete", "missed", "duplicate", "replayed-suffix", "replayed-window",
	"handover", "restart", "interleaved"}

type streamCase struct {
	Ops   []op
	Perts []pert
	// NoLastWindow leaves out the complete snapshot after the last
	// change, and with it the missed changes it would repair: the View
	// must then get the state right from the events alone, so that a
	// wrong prune by an earlier window is not hidden by the last one
	// listing the key again.
	NoLastWindow bool
	// Parts is the number of partitions at the start; Tombstones says
	// kubewire writes a Kafka tombstone after each delete.
	Parts      int
	Tombstones bool
}

// genCase draws a history of 5-20 keys, maybe partitions added, gaps and
// restores, and a few perturbations. A topic that grows sees no restore:
// docs/consumer.md says the rule cannot order the two together.
func genCase(r *rand.Rand) streamCase {
	keys := 5 + r.IntN(16)
	live := map[int]bool{}
	change := func() op {
		k := r.IntN(keys)
		switch {
		case !live[k]:
			live[k] = true
			return op{Kind: 'c', Key: k}
		case r.IntN(4) == 0:
			live[k] = false
			return op{Kind: 'd', Key: k}
		}
		return op{Kind: 'u', Key: k}
	}
	c := streamCase{NoLastWindow: r.IntN(2) == 0, Parts: 1 + r.IntN(2), Tombstones: r.IntN(2) == 0}
	grows := r.IntN(3) == 0
	for n := 10 + r.IntN(70); n > 0; n-- {
		switch x := r.IntN(40); {
		case x < 5:
			w := op{Kind: 'w', Seed: r.Uint64()}
			for m := r.IntN(4); m > 0; m-- {
				w.During = append(w.During, change())
			}
			c.Ops = append(c.Ops, w)
		case x < 6 && grows:
			c.Ops = append(c.Ops, op{Kind: 'p', N: 1 + r.IntN(2)})
		case x < 7:
			c.Ops = append(c.Ops, op{Kind: 'b'})
		case x < 9:
			g := op{Kind: 'g', Seed: r.Uint64(), Gap: gapKinds[r.IntN(len(gapKinds))]}
			if grows {
				g.Gap = gapKinds[r.IntN(2)]
			}
			if g.Gap == "expired" || g.Gap == "config-changed" {
				for m := r.IntN(4); m > 0; m-- {
					g.During = append(g.During, change())
				}
			} else {
				// After a restore, what is live is the backup's;
				// the generator's guess may be wrong, and ops
				// that no longer make sense are skipped.
				live = map[int]bool{}
			}
			c.Ops = append(c.Ops, g)
		default:
			c.Ops = append(c.Ops, change())
		}
	}
	for _, k := range pertKinds {
		if r.IntN(2) == 0 {
			for m := 1 + r.IntN(2); m > 0; m-- {
				c.Perts = append(c.Perts, pert{Kind: k, Seed: r.Uint64()})
			}
		}
	}
	return c
}

type objState struct {
	uid string
	rv  int
}

func part(i int) string { return "p" + strconv.Itoa(i) }

// afterGap ends the id of a snapshot that follows a gap.
const afterGap = "-after-gap"

// clean plays the ops and returns the stream kubewire would emit, ending
// with a complete snapshot after the last change, and the true state.
// Each key's events go to its partition, the key's number modulo the
// number of partitions, which grows when partitions are added; markers
// and gaps go to every partition.
func (c streamCase) clean() ([]rec, []heldObject) {
	state := map[string]objState{}
	rv, uids, windows, parts := 100, 0, 0, max(c.Parts, 1)
	var backup map[string]objState
	backupRV := 0
	var out []rec
	key := func(k int) string { return fmt.Sprintf("%s/ns/k%02d", vectorResource, k) }
	partOf := func(k string) string {
		n, _ := strconv.Atoi(k[strings.LastIndexByte(k, 'k')+1:])
		return part(n % parts)
	}
	everywhere := func(x rec) {
		for i := 0; i < parts; i++ {
			x.Part = part(i)
			out = append(out, x)
		}
	}
	do := func(o op, emit bool) {
		k := key(o.Key)
		s, ok := state[k]
		var x rec
		switch {
		case o.Kind == 'c' && !ok:
			rv++
			uids++
			s = objState{uid: fmt.Sprintf("uid-%d", uids), rv: rv}
			state[k] = s
			x = rec{Type: tAdded, Key: k, UID: s.uid, RV: rv}
		case o.Kind == 'u' && ok:
			rv++
			s.rv = rv
			state[k] = s
			x = rec{Type: tUpdated, Key: k, UID: s.uid, RV: rv}
		case o.Kind == 'd' && ok:
			rv++ // a delete has a resourceVersion of its own
			delete(state, k)
			x = rec{Type: tDeleted, Key: k, UID: s.uid, RV: rv}
		default:
			return
		}
		if !emit {
			return
		}
		x.Part = partOf(k)
		out = append(out, x)
		if x.Type == tDeleted && c.Tombstones {
			out = append(out, rec{Type: tTombstone, Key: k, Part: x.Part})
		}
	}
	window := func(o op, sid string) {
		r := rand.New(rand.NewPCG(o.Seed, 1))
		listed := make([]string, 0, len(state))
		for k := range state {
			listed = append(listed, k)
		}
		sort.Strings(listed)
		r.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
		// Changes during the window come between records; a record is
		// the object as it is when enqueued, so per key versions never
		// go backwards, and an object deleted before its turn has none.
		at := map[int][]op{}
		for _, d := range o.During {
			i := r.IntN(len(listed) + 1)
			at[i] = append(at[i], d)
		}
		everywhere(rec{Type: tStarted, Key: vectorResource, SID: sid})
		count := map[string]int{}
		for i := 0; i <= len(listed); i++ {
			for _, d := range at[i] {
				do(d, true)
			}
			if i == len(listed) {
				break
			}
			if s, ok := state[listed[i]]; ok {
				p := partOf(listed[i])
				out = append(out, rec{Type: tSynced, Key: listed[i], UID: s.uid, RV: s.rv, SID: sid, Part: p})
				count[p]++
			}
		}
		for i := 0; i < parts; i++ {
			out = append(out, rec{Type: tCompleted, Key: vectorResource, SID: sid, Count: count[part(i)], Part: part(i)})
		}
	}
	for _, o := range c.Ops {
		switch o.Kind {
		case 'w':
			windows++
			window(o, fmt.Sprintf("snap-%d", windows))
			continue
		case 'p':
			parts += o.N
			continue
		case 'b':
			backup, backupRV = maps.Clone(state), rv
			continue
		case 'g':
			from := rv
			g := rec{Type: tGap, Key: vectorResource, From: from, Reason: o.Gap}
			switch o.Gap {
			case "expired", "config-changed":
				for _, d := range o.During {
					do(d, false)
				}
				g.RV = rv
			case "backwards":
				if backup == nil || backupRV == rv {
					continue
				}
				state, rv = maps.Clone(backup), backupRV
				g.RV, g.Reason, g.Backwards = rv, "too-large", true
			case "bumped":
				if backup == nil {
					continue
				}
				state, rv = maps.Clone(backup), rv+1000
				g.RV, g.Reason = rv, "expired"
			}
			everywhere(g)
			windows++
			window(op{Seed: o.Seed}, fmt.Sprintf("snap-%d%s", windows, afterGap))
			continue
		}
		do(o, true)
	}
	if !c.NoLastWindow {
		window(op{Kind: 'w', Seed: 0}, "snap-last")
	}
	return out, truth(state)
}

func truth(state map[string]objState) []heldObject {
	out := []heldObject{}
	for k, s := range state {
		out = append(out, heldObject{Key: k, UID: s.uid, ResourceVersion: strconv.Itoa(s.rv)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// partOf is the partition a record is read from.
func (r rec) partition() string {
	if r.Part == "" {
		return firstPartition
	}
	return r.Part
}

// control reports whether r is a step of the reading (a hand-over, a
// restart) rather than a record of a partition.
func (r rec) control() bool { return r.Type == tHandover || r.Type == tRestart }

// windowAt returns the index of the started and completed markers of sid
// in partition p, or in any partition if p is "".
func windowAt(s []rec, sid, p string) (int, int) {
	start, end := -1, -1
	for i, r := range s {
		if r.SID != sid || r.control() || p != "" && r.partition() != p {
			continue
		}
		if r.Type == tStarted && start < 0 {
			start = i
		}
		if r.Type == tCompleted && end < 0 {
			end = i
		}
	}
	return start, end
}

func drop(s []rec, gone map[int]bool) []rec {
	out := make([]rec, 0, len(s))
	for i, r := range s {
		if !gone[i] {
			out = append(out, r)
		}
	}
	return out
}

// positions returns the position each record of s is read at (-1 for
// steps), as linesOf places them.
func positions(s []rec) []int64 {
	next := map[string]int64{}
	out := make([]int64, len(s))
	for i, r := range s {
		switch {
		case r.control():
			out[i] = -1
		case r.Reread:
			out[i] = r.At
		default:
			out[i] = next[r.partition()]
			next[r.partition()]++
		}
	}
	return out
}

// partitionsOf lists the partitions s has records in, sorted.
func partitionsOf(s []rec) []string {
	seen := map[string]bool{}
	for _, r := range s {
		if !r.control() {
			seen[r.partition()] = true
		}
	}
	return slices.Sorted(mapKeys(seen))
}

// redeliver inserts, after s[j], copies of the records of s[j]'s partition
// from s[i] to s[j], at their positions: the broker delivers the
// partition again from s[i] (a consumer group's rebalance, a restart from
// an older committed position).
func redeliver(s []rec, i, j int) []rec {
	p := s[j].partition()
	pos := positions(s)
	var copies []rec
	for k := i; k <= j; k++ {
		if x := s[k]; !x.control() && !x.Reread && x.partition() == p {
			x.Reread, x.At = true, pos[k]
			copies = append(copies, x)
		}
	}
	return slices.Insert(slices.Clone(s), j+1, copies...)
}

// perturb applies p to s; it reports false when s offers nothing for p.
func perturb(s []rec, p pert) ([]rec, bool) {
	r := rand.New(rand.NewPCG(p.Seed, 2))
	lastStart, _ := windowAt(s, "snap-last", "")
	parts := partitionsOf(s)
	switch p.Kind {
	case "conflated":
		// Runs of updates of one key in one partition with no other
		// event of that key between: kubewire's queue keeps the newest
		// and counts the rest.
		var runs [][]int
		byKey := map[string][]int{}
		for i, x := range s {
			if !x.marker() && !x.control() && x.Type != tGap {
				k := x.partition() + " " + x.Key
				byKey[k] = append(byKey[k], i)
			}
		}
		keys := slices.Sorted(mapKeys(byKey))
		for _, k := range keys {
			var run []int
			for _, i := range byKey[k] {
				if s[i].Type == tUpdated && !s[i].Reread {
					run = append(run, i)
					continue
				}
				if len(run) > 1 {
					runs = append(runs, run)
				}
				run = nil
			}
			if len(run) > 1 {
				runs = append(runs, run)
			}
		}
		if len(runs) == 0 {
			return s, false
		}
		run := runs[r.IntN(len(runs))]
		a := r.IntN(len(run) - 1)
		b := a + 1 + r.IntN(len(run)-a-1)
		gone := map[int]bool{}
		n := 0
		for _, i := range run[a:b] {
			gone[i] = true
			n += 1 + s[i].Conflated
		}
		s = slices.Clone(s)
		s[run[b]].Conflated += n
		return drop(s, gone), true
	case "incomplete":
		// Some records of a window other than the last, in one
		// partition, could not be delivered; its completed marker in
		// that partition says how many.
		type win struct{ sid, part string }
		var wins []win
		for _, x := range s {
			w := win{x.SID, x.partition()}
			// The window after a gap is all that repairs what the gap
			// lost; with one of its records lost too, nothing would.
			if x.Type == tSynced && x.SID != "snap-last" && !strings.HasSuffix(x.SID, afterGap) && !slices.Contains(wins, w) {
				wins = append(wins, w)
			}
		}
		// After the topic grew, a key's old partition prunes it when
		// its record in the new one is lost: the next complete snapshot
		// of the new one brings it back, and the stream must have one.
		if len(wins) == 0 || lastStart < 0 && len(parts) > 1 {
			return s, false
		}
		w := wins[r.IntN(len(wins))]
		gone := map[int]bool{}
		var recs []int
		for i, x := range s {
			if x.Type == tSynced && x.SID == w.sid && x.partition() == w.part {
				recs = append(recs, i)
			}
		}
		for _, i := range recs {
			if r.IntN(2) == 0 {
				gone[i] = true
			}
		}
		if len(gone) == 0 {
			gone[recs[r.IntN(len(recs))]] = true
		}
		_, end := windowAt(s, w.sid, w.part)
		s = slices.Clone(s)
		s[end].Incomplete += len(gone)
		return drop(s, gone), true
	case "missed":
		// Live events lost before the last snapshot, which is complete
		// and repairs them.
		if lastStart < 0 {
			return s, false
		}
		var cand []int
		for i, x := range s[:lastStart] {
			if x.live() {
				cand = append(cand, i)
			}
		}
		if len(cand) == 0 {
			return s, false
		}
		gone := map[int]bool{}
		for m := 1 + r.IntN(3); m > 0; m-- {
			gone[cand[r.IntN(len(cand))]] = true
		}
		return drop(s, gone), true
	case "duplicate":
		// A producer's retry: a copy right after the first, read at a
		// position of its own.
		i := r.IntN(len(s))
		if s[i].control() || s[i].Reread {
			return s, false
		}
		return slices.Insert(slices.Clone(s), i+1, s[i]), true
	case "replayed-suffix":
		// Read a partition up to s[j], then again from s[i].
		j := r.IntN(len(s))
		if s[j].control() {
			return s, false
		}
		var from []int
		for i := 0; i <= j; i++ {
			if !s[i].control() && s[i].partition() == s[j].partition() {
				from = append(from, i)
			}
		}
		return redeliver(s, from[r.IntN(len(from))], j), true
	case "replayed-window":
		// A redelivery that starts at a snapshot.started already applied.
		var starts []int
		for i, x := range s {
			if x.Type == tStarted && !x.Reread {
				if _, end := windowAt(s, x.SID, x.partition()); end > i {
					starts = append(starts, i)
				}
			}
		}
		if len(starts) == 0 {
			return s, false
		}
		i := starts[r.IntN(len(starts))]
		_, end := windowAt(s, s[i].SID, s[i].partition())
		var after []int
		for j := end; j < len(s); j++ {
			if !s[j].control() && s[j].partition() == s[i].partition() {
				after = append(after, j)
			}
		}
		return redeliver(s, i, after[r.IntN(len(after))]), true
	case "handover":
		// Another member of the group read a partition until here, and
		// hands it to the consumer.
		q := parts[r.IntN(len(parts))]
		if slices.ContainsFunc(s, func(x rec) bool { return x.Type == tHandover && x.Part == q }) {
			return s, false
		}
		return slices.Insert(slices.Clone(s), r.IntN(len(s)+1), rec{Type: tHandover, Part: q}), true
	case "restart":
		// The consumer saves its state, stops, and a new one loads it.
		return slices.Insert(slices.Clone(s), r.IntN(len(s)+1), rec{Type: tRestart}), true
	case "interleaved":
		// The partitions are read in another order: each one's own
		// order is kept, a hand-over with its partition's records.
		if len(parts) < 2 {
			return s, false
		}
		queues := map[string][]rec{}
		var order []string
		for _, x := range s {
			q := x.partition()
			if x.Type == tRestart {
				q = "restart"
			}
			queues[q] = append(queues[q], x)
			order = append(order, q)
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		out := make([]rec, 0, len(s))
		for _, q := range order {
			out = append(out, queues[q][0])
			queues[q] = queues[q][1:]
		}
		return out, true
	}
	panic("unknown perturbation " + p.Kind)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// stream returns the perturbed stream of c, its true final state, and the
// perturbation kinds that changed something.
func (c streamCase) stream() ([]rec, []heldObject, []string) {
	s, want := c.clean()
	perts := slices.Clone(c.Perts)
	sort.SliceStable(perts, func(i, j int) bool {
		return slices.Index(pertKinds, perts[i].Kind) < slices.Index(pertKinds, perts[j].Kind)
	})
	var applied []string
	for _, p := range perts {
		var ok bool
		if s, ok = perturb(s, p); ok && !slices.Contains(applied, p.Kind) {
			applied = append(applied, p.Kind)
		}
	}
	return s, want, applied
}

// viewOf plays a generated stream to a fresh View, each record at its
// position (see linesOf).
func viewOf(s []rec) []heldObject {
	v, err := play(linesOf(s), consumer.Options{})
	if err != nil {
		panic(err)
	}
	return heldBy(v)
}

func events(s []rec) []*event.Event {
	out := make([]*event.Event, len(s))
	for i, r := range s {
		out[i] = r.event()
	}
	return out
}

func (c streamCase) fails() bool {
	s, want, _ := c.stream()
	return !slices.Equal(viewOf(s), want)
}

// shrink removes perturbations, ops and changes during windows, one at a
// time, as long as the case still fails: a smaller history is easier to
// read than the stream that first failed.
func shrink(c streamCase) streamCase {
	for again := true; again; {
		again = false
		try := func(d streamCase) bool {
			if d.fails() {
				c, again = d, true
				return true
			}
			return false
		}
		with := func(ops []op, perts []pert) streamCase {
			d := c
			d.Ops, d.Perts = ops, perts
			return d
		}
		for i := 0; i < len(c.Perts); i++ {
			if try(with(c.Ops, slices.Delete(slices.Clone(c.Perts), i, i+1))) {
				i--
			}
		}
		for i := 0; i < len(c.Ops); i++ {
			if try(with(slices.Delete(slices.Clone(c.Ops), i, i+1), c.Perts)) {
				i--
				continue
			}
			for j := 0; j < len(c.Ops[i].During); j++ {
				ops := slices.Clone(c.Ops)
				ops[i].During = slices.Delete(slices.Clone(ops[i].During), j, j+1)
				if try(with(ops, c.Perts)) {
					j--
				}
			}
		}
	}
	return c
}

// writeVector writes a stream and its expected state in the format of
// testdata/consumer-vectors/README.md.
func writeVector(path string, ls []vline, want []heldObject) error {
	b, err := encodeLines(ls)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path+".jsonl", b, 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path+".json", append(j, '\n'), 0o644)
}

func TestTheViewConvergesOnEveryStreamTheWireCanCarry(t *testing.T) {
	n := 500
	if s := os.Getenv("KUBEWIRE_PROPERTY_STREAMS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("KUBEWIRE_PROPERTY_STREAMS=%q: %v", s, err)
		}
	}
	r := rand.New(rand.NewPCG(propertySeed, 0))
	perKind := map[string]int{}
	// features counts streams by what their history has.
	features := map[string]int{}
	// Failures by the set of perturbations their stream had: one set
	// failing again and again is likely one bug.
	failedWith := map[string]int{}
	nEvents, clean, failures, noLast := 0, 0, 0, 0
	for i := 0; i < n; i++ {
		c := genCase(r)
		s, want, applied := c.stream()
		nEvents += len(s)
		features[fmt.Sprintf("%d partitions at the start", c.Parts)]++
		if c.Tombstones {
			features["tombstones"]++
		}
		seen := map[string]bool{}
		for _, o := range c.Ops {
			switch o.Kind {
			case 'p':
				seen["partitions added"] = true
			case 'g':
				seen["gap "+o.Gap] = true
			}
		}
		for f := range seen {
			features[f]++
		}
		if c.NoLastWindow {
			noLast++
		}
		if len(applied) == 0 {
			clean++
		}
		for _, k := range applied {
			perKind[k]++
		}
		if got := viewOf(s); !slices.Equal(got, want) {
			failures++
			failedWith[strings.Join(applied, "+")]++
			if failures > 3 {
				continue // the first few are enough to read
			}
			m := shrink(c)
			ms, mwant, mapplied := m.stream()
			name := fmt.Sprintf("seed%d-stream%d", propertySeed, i)
			path := filepath.Join("..", "testdata", "consumer-vectors", "regressions", name)
			if err := writeVector(path, linesOf(ms), mwant); err != nil {
				t.Errorf("writing %s: %v", path, err)
			}
			var lines []string
			pos := positions(ms)
			for k, x := range ms {
				if x.control() {
					lines = append(lines, x.Type+" "+x.Part)
					continue
				}
				line := fmt.Sprintf("%s@%d ", x.partition(), pos[k])
				if x.Type == tTombstone {
					line += "tombstone " + x.Key
				} else {
					line += x.Type[len(encoding.TypePrefix):] + " " + x.id()
				}
				if x.Reread {
					line += " (again)"
				}
				if x.Conflated > 0 {
					line += fmt.Sprintf(" conflated=%d", x.Conflated)
				}
				if x.Incomplete > 0 {
					line += fmt.Sprintf(" incomplete=%d", x.Incomplete)
				}
				lines = append(lines, line)
			}
			t.Errorf("stream %d (seed %d) does not converge; shrunk to %d events, perturbations %v, written to %s.jsonl:\n  %s\nwant %v\ngot  %v",
				i, propertySeed, len(ms), mapplied, path, strings.Join(lines, "\n  "), mwant, viewOf(ms))
		}
	}
	t.Logf("seed %d: %d streams (%d without a snapshot after the last change), %d events, %d failing; streams per perturbation kind (a stream may have several): %s; unperturbed: %d",
		propertySeed, n, noLast, nEvents, failures, fmtKinds(perKind), clean)
	t.Logf("streams by history (a stream may have several; gaps are played only when their restore has a backup): %v", features)
	if failures > 0 {
		t.Logf("failing streams by perturbations: %v", failedWith)
	}
}

func fmtKinds(m map[string]int) string {
	var parts []string
	for _, k := range pertKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
