package consumer_test

import (
	"encoding/json"
	"fmt"
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
	// tTombstone is a Kafka tombstone of Key; tHandover hands Part over
	// from another member of the group (see vectorformat_test.go).
	tTombstone, tHandover = "tombstone", "handover"
	vectorResource        = "configmaps"
)

func (r rec) marker() bool { return r.Type == tStarted || r.Type == tCompleted }
func (r rec) live() bool   { return r.Type == tAdded || r.Type == tUpdated || r.Type == tDeleted }

// id is the id kubewire gives the event (docs/events.md, "Event ids").
func (r rec) id() string {
	op := r.Type[strings.LastIndexByte(r.Type, '.')+1:]
	switch {
	case r.Type == tGap:
		return r.Key + "/gap/" + strconv.Itoa(r.From) + "-" + strconv.Itoa(r.RV)
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

// op is one change of the cluster, or a snapshot window during which the
// changes of during happen. Ops that no longer make sense after shrinking
// removed others (an update of a key not live) are skipped.
type op struct {
	Kind   byte // 'c'reate, 'u'pdate, 'd'elete, 'w'indow
	Key    int
	Seed   uint64 // a window's order of records and of its changes
	During []op
}

// pert is one perturbation of the clean stream, drawn from its own seed so
// that removing another one while shrinking leaves it as it was.
type pert struct {
	Kind string
	Seed uint64
}

// The perturbation kinds of docs/events.md. Losses come first: a replay
// repeats what the broker holds, losses included.
var pertKinds = []string{"conflated", "incomplete", "missed", "duplicate", "replayed-suffix", "replayed-window"}

type streamCase struct {
	Ops   []op
	Perts []pert
	// NoLastWindow leaves out the complete snapshot after the last
	// change, and with it the missed changes it would repair: the View
	// must then get the state right from the events alone, so that a
	// wrong prune by an earlier window is not hidden by the last one
	// listing the key again.
	NoLastWindow bool
}

// genCase draws a history of 5-20 keys and a few perturbations.
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
	c := streamCase{NoLastWindow: r.IntN(2) == 0}
	for n := 10 + r.IntN(70); n > 0; n-- {
		if r.IntN(8) == 0 {
			w := op{Kind: 'w', Seed: r.Uint64()}
			for m := r.IntN(4); m > 0; m-- {
				w.During = append(w.During, change())
			}
			c.Ops = append(c.Ops, w)
			continue
		}
		c.Ops = append(c.Ops, change())
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

// clean plays the ops and returns the stream kubewire would emit, ending
// with a complete snapshot after the last change, and the true state.
func (c streamCase) clean() ([]rec, []heldObject) {
	state := map[string]objState{}
	rv, uids, windows := 100, 0, 0
	var out []rec
	key := func(k int) string { return fmt.Sprintf("%s/ns/k%02d", vectorResource, k) }
	do := func(o op) {
		k := key(o.Key)
		s, ok := state[k]
		switch {
		case o.Kind == 'c' && !ok:
			rv++
			uids++
			s = objState{uid: fmt.Sprintf("uid-%d", uids), rv: rv}
			state[k] = s
			out = append(out, rec{Type: tAdded, Key: k, UID: s.uid, RV: rv})
		case o.Kind == 'u' && ok:
			rv++
			s.rv = rv
			state[k] = s
			out = append(out, rec{Type: tUpdated, Key: k, UID: s.uid, RV: rv})
		case o.Kind == 'd' && ok:
			rv++ // a delete has a resourceVersion of its own
			delete(state, k)
			out = append(out, rec{Type: tDeleted, Key: k, UID: s.uid, RV: rv})
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
		out = append(out, rec{Type: tStarted, Key: vectorResource, SID: sid})
		count := 0
		for i := 0; i <= len(listed); i++ {
			for _, d := range at[i] {
				do(d)
			}
			if i == len(listed) {
				break
			}
			if s, ok := state[listed[i]]; ok {
				out = append(out, rec{Type: tSynced, Key: listed[i], UID: s.uid, RV: s.rv, SID: sid})
				count++
			}
		}
		out = append(out, rec{Type: tCompleted, Key: vectorResource, SID: sid, Count: count})
	}
	for _, o := range c.Ops {
		if o.Kind == 'w' {
			windows++
			window(o, fmt.Sprintf("snap-%d", windows))
			continue
		}
		do(o)
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

// windowAt returns the index of the started and completed markers of sid.
func windowAt(s []rec, sid string) (int, int) {
	start, end := -1, -1
	for i, r := range s {
		if r.SID == sid && r.Type == tStarted && start < 0 {
			start = i
		}
		if r.SID == sid && r.Type == tCompleted && end < 0 {
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

// perturb applies p to s; it reports false when s offers nothing for p.
func perturb(s []rec, p pert) ([]rec, bool) {
	r := rand.New(rand.NewPCG(p.Seed, 2))
	lastStart, _ := windowAt(s, "snap-last")
	switch p.Kind {
	case "conflated":
		// Runs of updates of one key with no other event of that key
		// between: kubewire's queue keeps the newest and counts the rest.
		var runs [][]int
		byKey := map[string][]int{}
		for i, x := range s {
			if !x.marker() {
				byKey[x.Key] = append(byKey[x.Key], i)
			}
		}
		keys := slices.Sorted(mapKeys(byKey))
		for _, k := range keys {
			var run []int
			for _, i := range byKey[k] {
				if s[i].Type == tUpdated {
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
		// Some records of a window other than the last could not be
		// delivered; its completed marker says how many.
		var sids []string
		for _, x := range s {
			if x.Type == tSynced && x.SID != "snap-last" && !slices.Contains(sids, x.SID) {
				sids = append(sids, x.SID)
			}
		}
		if len(sids) == 0 {
			return s, false
		}
		sid := sids[r.IntN(len(sids))]
		gone := map[int]bool{}
		var recs []int
		for i, x := range s {
			if x.Type == tSynced && x.SID == sid {
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
		_, end := windowAt(s, sid)
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
		i := r.IntN(len(s))
		return slices.Insert(slices.Clone(s), i+1, s[i]), true
	case "replayed-suffix":
		// Read up to j, then read again from i: s[:j] + s[i:].
		j := 1 + r.IntN(len(s))
		i := r.IntN(j)
		return append(slices.Clone(s[:j]), s[i:]...), true
	case "replayed-window":
		// A suffix that starts at a snapshot.started already applied.
		var starts []int
		for i, x := range s {
			if x.Type == tStarted {
				if _, end := windowAt(s, x.SID); end > i {
					starts = append(starts, i)
				}
			}
		}
		if len(starts) == 0 {
			return s, false
		}
		i := starts[r.IntN(len(starts))]
		_, end := windowAt(s, s[i].SID)
		j := end + 1 + r.IntN(len(s)-end)
		return append(slices.Clone(s[:j]), s[i:]...), true
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
		for i := 0; i < len(c.Perts); i++ {
			if try(streamCase{Ops: c.Ops, Perts: slices.Delete(slices.Clone(c.Perts), i, i+1), NoLastWindow: c.NoLastWindow}) {
				i--
			}
		}
		for i := 0; i < len(c.Ops); i++ {
			if try(streamCase{Ops: slices.Delete(slices.Clone(c.Ops), i, i+1), Perts: c.Perts, NoLastWindow: c.NoLastWindow}) {
				i--
				continue
			}
			for j := 0; j < len(c.Ops[i].During); j++ {
				ops := slices.Clone(c.Ops)
				ops[i].During = slices.Delete(slices.Clone(ops[i].During), j, j+1)
				if try(streamCase{Ops: ops, Perts: c.Perts, NoLastWindow: c.NoLastWindow}) {
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
	// Failures by the set of perturbations their stream had: one set
	// failing again and again is likely one bug.
	failedWith := map[string]int{}
	nEvents, clean, failures, known, noLast := 0, 0, 0, 0, 0
	for i := 0; i < n; i++ {
		c := genCase(r)
		s, want, applied := c.stream()
		nEvents += len(s)
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
			if knownLimitation(s, want, got, applied) && os.Getenv("KUBEWIRE_PROPERTY_STRICT") == "" {
				known++
				continue
			}
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
			for _, x := range ms {
				line := x.Type[len(encoding.TypePrefix):] + " " + x.id()
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
	if failures > 0 {
		t.Logf("failing streams by perturbations: %v", failedWith)
	}
	t.Logf("streams that end with a known limitation of docs/consumer.md (a replay keeps or brings back a key whose delete was lost, until the next complete snapshot; KUBEWIRE_PROPERTY_STRICT=1 fails on them): %d", known)
}

func fmtKinds(m map[string]int) string {
	var parts []string
	for _, k := range pertKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// knownLimitation reports whether got differs from want only as
// docs/consumer.md, "Not there yet", says it may: the View holds keys the
// cluster no longer has, whose delete was lost, at a version read before
// the last snapshot started, and a replay delivered events of that object
// again after it started. Either the replay came after the window pruned
// the key and a later complete window made the View forget it (the
// replayed change brings it back; the replayed window that pruned it is
// skipped), or it came inside the window, and the View counts a replayed
// event as an event since started, so the window does not prune the key.
// Both last until the next complete snapshot, which the stream lacks.
func knownLimitation(s []rec, want, got []heldObject, applied []string) bool {
	if !slices.Contains(applied, "replayed-suffix") && !slices.Contains(applied, "replayed-window") {
		return false
	}
	lastStart, _ := windowAt(s, "snap-last")
	for _, g := range got {
		if i := slices.IndexFunc(want, func(w heldObject) bool { return w.Key == g.Key }); i >= 0 {
			if want[i] != g {
				return false
			}
			continue
		}
		readBefore, replayedAfter := false, false
		first := map[string]int{}
		for i, x := range s {
			if x.Key != g.Key || x.UID != g.UID {
				continue
			}
			if x.Type == tDeleted {
				return false // not lost: a delete the View should have applied
			}
			readBefore = readBefore || i < lastStart && strconv.Itoa(x.RV) == g.ResourceVersion
			if f, ok := first[x.id()]; !ok {
				first[x.id()] = i
			} else if f < lastStart && i > lastStart {
				replayedAfter = true
			}
		}
		if !readBefore || !replayedAfter {
			return false
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}
