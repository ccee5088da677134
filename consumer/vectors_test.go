package consumer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// vectorsDir holds streams of the grammar of docs/events.md and the state
// a consumer must end with; its README.md describes the format.
var vectorsDir = filepath.Join("..", "testdata", "consumer-vectors")

// vector is a hand-picked stream and the state a consumer must end in.
// bad, in the vectors of bad-records/, holds the records that break the
// contract, by index: a nil func leaves the record as the stream has it
// (a completed marker of a window never started), another one breaks it.
type vector struct {
	stream []rec
	want   []heldObject
	bad    map[int]func(*event.Event)
}

// lines are the vector's lines, with its bad records broken.
func (v vector) lines() []vline {
	ls := linesOf(v.stream)
	for i, f := range v.bad {
		if f != nil {
			f(ls[i].ev)
		}
	}
	return ls
}

// handPicked are the hand-picked vectors, one per part of the grammar, so
// that a consumer that fails one learns which rule it broke. They are
// written to vectorsDir with KUBEWIRE_UPDATE_VECTORS=1; the files are what
// other consumers read, so the expected states are written here by hand,
// not taken from the View.
func handPicked() map[string]vector {
	const a, b, c = "configmaps/ns/a", "configmaps/ns/b", "configmaps/ns/c"
	add := func(k, uid string, rv int) rec { return rec{Type: tAdded, Key: k, UID: uid, RV: rv} }
	upd := func(k, uid string, rv int) rec { return rec{Type: tUpdated, Key: k, UID: uid, RV: rv} }
	del := func(k, uid string, rv int) rec { return rec{Type: tDeleted, Key: k, UID: uid, RV: rv} }
	syn := func(k, uid string, rv int, sid string) rec {
		return rec{Type: tSynced, Key: k, UID: uid, RV: rv, SID: sid}
	}
	started := func(sid string) rec { return rec{Type: tStarted, Key: vectorResource, SID: sid} }
	completed := func(sid string, count int) rec {
		return rec{Type: tCompleted, Key: vectorResource, SID: sid, Count: count}
	}
	gap := func(from, to int) rec {
		return rec{Type: tGap, Key: vectorResource, From: from, RV: to, Reason: "expired"}
	}
	backwards := func(from, to int) rec {
		return rec{Type: tGap, Key: vectorResource, From: from, RV: to, Reason: "too-large", Backwards: true}
	}
	noRV := func(e *event.Event) { e.SetExtension(encoding.ExtResourceVersion, nil) }
	rvOf := func(rv string) func(*event.Event) {
		return func(e *event.Event) { e.SetExtension(encoding.ExtResourceVersion, rv) }
	}
	unreadableGap := func(e *event.Event) {
		e.SetID(vectorResource + "/gap/abc--")
		_ = e.SetData(event.ApplicationJSON, map[string]any{"group": "", "version": "v1", "resource": vectorResource,
			"from": "abc", "to": "-", "reason": "expired"})
	}
	obj := func(k, uid, rv string) heldObject { return heldObject{Key: k, UID: uid, ResourceVersion: rv} }
	conflated := upd(a, "uid-a1", 14)
	conflated.Conflated = 2
	incomplete := completed("s1", 2)
	incomplete.Incomplete = 1
	history := []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), upd(a, "uid-a1", 12), del(b, "uid-b1", 13)}
	// beforeRestore is a history whose versions an etcd restore takes
	// back: the backup holds a at 850 and c at 840, not b.
	beforeRestore := []rec{add(a, "uid-a1", 999), upd(a, "uid-a1", 1000), add(b, "uid-b1", 1001), add(c, "uid-c1", 1002), del(c, "uid-c1", 1003)}
	restoredSnapshot := []rec{started("s1"), syn(a, "uid-a1", 850, "s1"), syn(c, "uid-c1", 840, "s1"), completed("s1", 2)}
	bumped := append(append(slices.Clone(beforeRestore), gap(1003, 5000)), restoredSnapshot...)
	bumped = append(bumped, upd(a, "uid-a1", 5001))
	// in reads r from partition p; again reads r again at position at
	// (a redelivery by the broker), redelivered reads s again from at.
	in := func(p string, r rec) rec { r.Part = p; return r }
	again := func(r rec, at int64) rec { r.Reread, r.At = true, at; return r }
	redelivered := func(s []rec, from int) []rec {
		var out []rec
		for i, r := range s[from:] {
			out = append(out, again(r, int64(from+i)))
		}
		return out
	}
	tomb := func(p, k string) rec { return rec{Type: tTombstone, Key: k, Part: p} }
	handover := func(p string) rec { return rec{Type: tHandover, Part: p} }
	objOf := func(k, uid string, rv int) rec { return rec{Type: tAdded, Key: k, UID: uid, RV: rv} }
	forgottenPrune := []rec{add(a, "uid-a1", 10), started("s1"), completed("s1", 0), started("s2"), completed("s2", 0)}
	// grown is issue 41's smallest repro: a's earlier object was added and
	// deleted in p0, whose tombstone trails; a now hashes to p1, added
	// when the topic grew, where its new object and two snapshots are.
	grownP0 := []rec{add(a, "uid-a1", 10), del(a, "uid-a1", 11), tomb("p0", a)}
	grownP1 := []rec{in("p1", objOf(a, "uid-a2", 20)),
		in("p1", started("s2")), in("p1", syn(a, "uid-a2", 20, "s2")), in("p1", completed("s2", 1)),
		in("p1", started("s3")), in("p1", syn(a, "uid-a2", 20, "s3")), in("p1", completed("s3", 1))}
	windows := []rec{started("s1"), syn(a, "uid-a1", 10, "s1"), completed("s1", 1),
		started("s2"), completed("s2", 0), started("s3"), completed("s3", 0)}
	return map[string]vector{
		"01-clean": {
			stream: append(slices.Clone(history), started("s1"), syn(a, "uid-a1", 12, "s1"), completed("s1", 1)),
			want:   []heldObject{obj(a, "uid-a1", "12")},
		},
		"02-duplicates": {
			stream: []rec{add(a, "uid-a1", 10), add(a, "uid-a1", 10), add(b, "uid-b1", 11), upd(a, "uid-a1", 12), upd(a, "uid-a1", 12),
				del(b, "uid-b1", 13), del(b, "uid-b1", 13), started("s1"), started("s1"), syn(a, "uid-a1", 12, "s1"), syn(a, "uid-a1", 12, "s1"),
				completed("s1", 1), completed("s1", 1)},
			want: []heldObject{obj(a, "uid-a1", "12")},
		},
		"03-replayed-suffix": {
			// Read up to the delete, then again from the first update:
			// versions never go backwards and the deleted key stays gone.
			stream: append(slices.Clone(history), upd(a, "uid-a1", 12), del(b, "uid-b1", 13), add(c, "uid-c1", 14)),
			want:   []heldObject{obj(a, "uid-a1", "12"), obj(c, "uid-c1", "14")},
		},
		"04-replayed-window": {
			// A window applied, changes after it, then the window and the
			// changes again: the replayed completed must prune nothing and
			// its records must not bring b back.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11),
				started("s1"), syn(a, "uid-a1", 10, "s1"), syn(b, "uid-b1", 11, "s1"), completed("s1", 2),
				add(c, "uid-c1", 12), upd(a, "uid-a1", 13), del(b, "uid-b1", 14),
				started("s1"), syn(a, "uid-a1", 10, "s1"), syn(b, "uid-b1", 11, "s1"), completed("s1", 2),
				add(c, "uid-c1", 12), upd(a, "uid-a1", 13), del(b, "uid-b1", 14)},
			want: []heldObject{obj(a, "uid-a1", "13"), obj(c, "uid-c1", "12")},
		},
		"05-conflated": {
			// Updates at 12 and 13 were folded into the one at 14.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), conflated},
			want:   []heldObject{obj(a, "uid-a1", "14"), obj(b, "uid-b1", "11")},
		},
		"06-incomplete": {
			// b's record was not delivered: the marker says so, and b,
			// with no event since started, must not be pruned.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), started("s1"), syn(a, "uid-a1", 10, "s1"), incomplete},
			want:   []heldObject{obj(a, "uid-a1", "10"), obj(b, "uid-b1", "11")},
		},
		"07-missed-changes-repaired-by-a-snapshot": {
			// b's delete, c's add and a's update were lost; the complete
			// snapshot after them prunes b and lists a and c.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11),
				started("s1"), syn(a, "uid-a1", 13, "s1"), syn(c, "uid-c1", 14, "s1"), completed("s1", 2)},
			want: []heldObject{obj(a, "uid-a1", "13"), obj(c, "uid-c1", "14")},
		},
		"08-recreated-with-a-new-uid": {
			// a is deleted and created again; a late copy of the old
			// object's update must not replace the new one.
			stream: []rec{add(a, "uid-a1", 10), del(a, "uid-a1", 11), add(a, "uid-a2", 12), upd(a, "uid-a1", 10), del(a, "uid-a1", 11)},
			want:   []heldObject{obj(a, "uid-a2", "12")},
		},
		"regressions/replayed-delete-of-an-earlier-object": {
			// Found by TestTheViewConvergesOnEveryStreamTheWireCanCarry
			// (seed29-stream363), shrunk by hand. uid-a2's delete at 13
			// was lost and s1 pruned a. A replay from the first offset
			// brings uid-a1's delete at 11: it must not lower the version
			// a was removed at, or the replayed add of uid-a2 at 12 comes
			// back (the replayed s1 that pruned it is skipped).
			stream: []rec{add(a, "uid-a1", 10), del(a, "uid-a1", 11), add(a, "uid-a2", 12), started("s1"), completed("s1", 0),
				add(a, "uid-a1", 10), del(a, "uid-a1", 11), add(a, "uid-a2", 12), started("s1"), completed("s1", 0)},
			want: []heldObject{},
		},
		"regressions/replay-after-a-forgotten-prune-redelivered": {
			// Found by TestTheViewConvergesOnEveryStreamTheWireCanCarry
			// (seed 29, stream 363), shrunk by hand. a's delete at 11 was
			// lost; s1 prunes a; s2, complete, forgets that a was
			// removed; then the broker delivers the partition again from
			// its first offset. Read at the positions they were first
			// read at, the copies are skipped (step 0 of the rule); a
			// consumer that took them for new records brought a back,
			// the copy of s1 that would prune it being skipped.
			stream: append(slices.Clone(forgottenPrune), redelivered(forgottenPrune, 0)...),
			want:   []heldObject{},
		},
		"10-gap-then-snapshot": {
			// kubewire's watch expired after rv 11 and it listed again at
			// 20: a's update, c's add and b's delete in between were never
			// sent. The gap (sent to every partition, here twice) changes
			// nothing; the snapshot that follows lists a and c and prunes b.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), gap(11, 20), gap(11, 20),
				started("s1"), syn(a, "uid-a1", 15, "s1"), syn(c, "uid-c1", 18, "s1"), completed("s1", 2)},
			want: []heldObject{obj(a, "uid-a1", "15"), obj(c, "uid-c1", "18")},
		},
		"11-replayed-window-after-its-key-was-pruned": {
			// a's delete at 11 was lost; s2 pruned a, and s3 passed it,
			// so nothing remembers a. A replay from s1's started then
			// brings s1's record of a: it is of a window already
			// applied, and must be skipped, or a comes back for good
			// (the replayed s2 and s3 are skipped too).
			stream: append(append([]rec{add(a, "uid-a1", 10)}, windows...), windows...),
			want:   []heldObject{},
		},
		"12-versions-went-backwards": {
			// etcd was restored from a backup: kubewire's gap says the
			// versions went backwards (to < from), and the snapshot after
			// it lists a and c at the backup's versions, older than those
			// held; a retry's copy of a's last event before the gap comes
			// between. The consumer forgets the versions it remembered,
			// takes the snapshot (c comes back, b is pruned) and the
			// changes after it.
			stream: append(append(append(slices.Clone(beforeRestore), backwards(1003, 860), backwards(1003, 860), upd(a, "uid-a1", 1000)),
				restoredSnapshot...), upd(a, "uid-a1", 870), add(b, "uid-b2", 871)),
			want: []heldObject{obj(a, "uid-a1", "870"), obj(b, "uid-b2", "871"), obj(c, "uid-c1", "840")},
		},
		"13-restored-with-bumped-revisions-then-redelivered": {
			// etcd was restored with its revisions bumped: the gap is an
			// ordinary expired one, far above, and the snapshot after it
			// lists a and c at the backup's older versions. Then the
			// broker delivers the partition again from b's add, at the
			// positions first read: none of it is new (c's delete and b
			// must not come back), and a's change after it is.
			stream: append(append(slices.Clone(bumped), redelivered(bumped, 2)...), upd(a, "uid-a1", 5002)),
			want:   []heldObject{obj(a, "uid-a1", "5002"), obj(c, "uid-c1", "840")},
		},
		"14-topic-grew-a-tombstone-trails-a-newer-object": {
			// p1's first record is read before p0's: p0's tombstone, of
			// the delete of a's earlier object, must not remove a's new
			// object, and s2 and s3 list it.
			stream: append(append([]rec{grownP1[0]}, grownP0...), grownP1[1:]...),
			want:   []heldObject{obj(a, "uid-a2", "20")},
		},
		"15-a-partition-handed-over-keeps-the-newer-version": {
			// Another member read p0, where a, b and c were; a and b now
			// hash to p1, which this consumer reads: a was deleted there
			// at 10, b updated to 9. c, only in p0, was updated after the
			// hand-over. Adopting p0 keeps the newer version of each key,
			// a delete counting as one.
			stream: []rec{add(a, "uid-a1", 5), add(b, "uid-b1", 6), add(c, "uid-c1", 7),
				in("p1", upd(a, "uid-a1", 8)), in("p1", del(a, "uid-a1", 10)), in("p1", upd(b, "uid-b1", 9)),
				handover("p0"), upd(c, "uid-c1", 11)},
			want: []heldObject{obj(b, "uid-b1", "9"), obj(c, "uid-c1", "11")},
		},
		"16-pruned-then-listed-through-an-added-partition": {
			// p0's window of s1 prunes a, which now hashes to p1, added
			// when the topic grew; p1's window of s1, opened before that
			// prune, lists a at the version it was pruned at: a is live.
			stream: []rec{add(a, "uid-a1", 5), started("s1"), in("p1", started("s1")), completed("s1", 0),
				in("p1", syn(a, "uid-a1", 5, "s1")), in("p1", completed("s1", 1))},
			want: []heldObject{obj(a, "uid-a1", "5")},
		},
		"17-a-tombstone-after-a-delete-not-applied": {
			// kubewire, restarted from its checkpoint, sends a's delete of
			// its earlier object and the tombstone after it again, after
			// the new object: neither removes it.
			stream: []rec{add(a, "uid-a1", 10), del(a, "uid-a1", 11), tomb("p0", a), add(a, "uid-a2", 12),
				del(a, "uid-a1", 11), tomb("p0", a), add(a, "uid-a2", 12)},
			want: []heldObject{obj(a, "uid-a2", "12")},
		},
		"18-relist-after-an-expired-watch": {
			// The watch expired after 11 and kubewire listed at 40: it
			// sends b's delete it lost, at the version it last knew, and
			// a's update the list found, both not above the gap's to, then
			// the snapshot. They are the new history.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), gap(11, 40), del(b, "uid-b1", 11), upd(a, "uid-a1", 30),
				add(c, "uid-c1", 35), started("s1"), syn(a, "uid-a1", 30, "s1"), syn(c, "uid-c1", 35, "s1"), completed("s1", 2),
				upd(a, "uid-a1", 41)},
			want: []heldObject{obj(a, "uid-a1", "41"), obj(c, "uid-c1", "35")},
		},
		"19-versions-went-backwards-then-redelivered": {
			// A plain restore (backwards), its snapshot and a change after
			// it; then the broker delivers the whole partition again: the
			// versions above the gap's to, of the history that no longer
			// exists, must not come back.
			stream: append(append(append(append(slices.Clone(beforeRestore), backwards(1003, 860)), restoredSnapshot...), upd(a, "uid-a1", 870)),
				redelivered(append(append(append(slices.Clone(beforeRestore), backwards(1003, 860)), restoredSnapshot...), upd(a, "uid-a1", 870)), 0)...),
			want: []heldObject{obj(a, "uid-a1", "870"), obj(c, "uid-c1", "840")},
		},
		"20-a-gap-in-every-partition-forgets-each-ones-keys": {
			// a is in p0, b in p1; a restore with bumped revisions: each
			// partition gets the gap and its window of the snapshot, which
			// lists its key at the backup's older version. p1's copy of
			// the gap is read after p0's whole window.
			stream: []rec{add(a, "uid-a1", 100), in("p1", add(b, "uid-b1", 101)),
				gap(101, 9000), started("s1"), syn(a, "uid-a1", 50, "s1"), completed("s1", 1),
				in("p1", gap(101, 9000)), in("p1", started("s1")), in("p1", syn(b, "uid-b1", 60, "s1")), in("p1", completed("s1", 1))},
			want: []heldObject{obj(a, "uid-a1", "50"), obj(b, "uid-b1", "60")},
		},
		"21-resource-removed-deletes-what-no-delete-reached": {
			// Issue 43: a CRD deleted while kubewire's watch was broken.
			// No delete of a or b ever comes, and a snapshot window is
			// left open; resource.removed deletes every key of the
			// resource and closes the window. A CRD created again under
			// the name starts afresh with a snapshot, read up to its
			// first record: only resource.removed can have removed a and b.
			stream: []rec{add(a, "uid-a1", 10), add(b, "uid-b1", 11), started("s1"), syn(a, "uid-a1", 11, "s1"),
				{Type: tRemoved, Key: vectorResource, UID: "uid-crd1"},
				started("s2"), syn(c, "uid-c1", 20, "s2")},
			want: []heldObject{obj(c, "uid-c1", "20")},
		},
		"regressions/topic-grew-listed-by-the-same-snapshot-in-the-new-partition": {
			// Found by TestTheViewConvergesOnEveryStreamTheWireCanCarry
			// (partitions added, read interleaved), shrunk by hand. a was
			// added in p0 and now hashes to p1, whose window of s2 lists it
			// and is read before p0's: p0's window of s2 must not prune a,
			// which the same snapshot listed in p1.
			stream: []rec{add(a, "uid-a1", 101), in("p1", started("s2")), in("p1", syn(a, "uid-a1", 101, "s2")),
				started("s2"), completed("s2", 0), in("p1", completed("s2", 1))},
			want: []heldObject{obj(a, "uid-a1", "101")},
		},
		"regressions/topic-grew-a-stale-record-of-the-old-partition-keeps-nothing": {
			// Found by the same test, shrunk by hand. a moved from p0 to
			// p1, was updated there, and its delete was lost; p1's window
			// of s2 does not list it. A record of an older snapshot of
			// p0, read inside that window, is no event of a for p1's
			// prune.
			stream: []rec{add(a, "uid-a1", 101), in("p1", upd(a, "uid-a1", 102)),
				in("p1", started("s2")), started("s1"), syn(a, "uid-a1", 101, "s1"), completed("s1", 1),
				in("p1", completed("s2", 0)), started("s2"), completed("s2", 0)},
			want: []heldObject{},
		},
		"bad-records/01-versions-that-cannot-be-read": {
			// Records that break the contract, between good ones: an
			// update and a delete with no resourceversion, a synced record
			// at "xyz", a gap from "abc" to "-" (it forgets nothing: s2's
			// older record of a stays stale), and a completed marker of a
			// snapshot never started. None is applied; each is reported.
			stream: []rec{add(a, "uid-a1", 10), upd(a, "uid-a1", 11), del(a, "uid-a1", 12),
				started("s1"), syn(a, "uid-a1", 10, "s1"), completed("s1", 1), upd(a, "uid-a1", 14),
				gap(14, 15), started("s2"), syn(a, "uid-a1", 12, "s2"), syn(b, "uid-b1", 13, "s2"), completed("s2", 2),
				completed("s9", 0)},
			bad:  map[int]func(*event.Event){1: noRV, 2: noRV, 7: unreadableGap, 10: rvOf("xyz"), 12: nil},
			want: []heldObject{obj(a, "uid-a1", "14")},
		},
		"09-pruned-key-listed-again": {
			// s1 completed with no record of a and no incomplete marker,
			// so a was pruned; s2 lists it, at the same version: it is
			// live.
			stream: []rec{add(a, "uid-a1", 10), started("s1"), completed("s1", 0),
				started("s2"), syn(a, "uid-a1", 10, "s2"), completed("s2", 1)},
			want: []heldObject{obj(a, "uid-a1", "10")},
		},
	}
}

// readVector reads a .jsonl stream and its .json expected state.
func readVector(t *testing.T, base string) ([]vline, []heldObject) {
	t.Helper()
	raw, err := os.ReadFile(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := decodeLines(raw)
	if err != nil {
		t.Fatalf("%s.jsonl: %v", base, err)
	}
	raw, err = os.ReadFile(base + ".json")
	if err != nil {
		t.Fatal(err)
	}
	want := []heldObject{}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%s.json: %v", base, err)
	}
	return ls, want
}

// playVector plays a vector to a fresh View and returns its state and
// the records it took for unknown, malformed or unmatched.
func playVector(t *testing.T, ls []vline) ([]heldObject, []consumer.Problem) {
	t.Helper()
	var out []consumer.Problem
	v, err := play(ls, consumer.Options{OnProblem: func(p consumer.Problem) {
		if p.Reason == consumer.ProblemUnknownType || p.Reason == consumer.ProblemMalformed || p.Reason == consumer.ProblemUnmatched {
			out = append(out, p)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return heldBy(v), out
}

func TestEveryConsumerVectorEndsInItsExpectedState(t *testing.T) {
	if os.Getenv("KUBEWIRE_UPDATE_VECTORS") != "" {
		for name, v := range handPicked() {
			if err := writeVector(filepath.Join(vectorsDir, name), v.lines(), v.want); err != nil {
				t.Fatal(err)
			}
		}
	}
	var files []string
	for _, glob := range []string{"*.jsonl", "regressions/*.jsonl", "bad-records/*.jsonl"} {
		m, err := filepath.Glob(filepath.Join(vectorsDir, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	// A missing hand-picked vector would pass silently: count them.
	if n := max(len(handPicked()), 24); len(files) < n {
		t.Fatalf("%d vectors in %s, want at least %d (issue 41) and every hand-picked one", len(files), vectorsDir, n)
	}
	for _, f := range files {
		base := strings.TrimSuffix(f, ".jsonl")
		name, _ := filepath.Rel(vectorsDir, base)
		t.Run(name, func(t *testing.T) {
			evs, want := readVector(t, base)
			got, reported := playVector(t, evs)
			// Every event of a vector is of the contract, and the View
			// must know each one, whatever the state it ends in; but for
			// those of bad-records/, whose bad records it must report.
			if strings.HasPrefix(name, "bad-records"+string(filepath.Separator)) {
				v, ok := handPicked()[filepath.ToSlash(name)]
				switch {
				case ok && len(reported) != len(v.bad):
					t.Errorf("the View reported %d bad records, want %d: %+v", len(reported), len(v.bad), reported)
				case len(reported) == 0:
					t.Errorf("the View reported no bad record")
				}
				reported = nil
			}
			for _, p := range reported {
				t.Errorf("the View does not know event %s at offset %d: %s: %s", p.ID, p.Position.Offset, p.Reason, p.Detail)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%d lines\nwant %v\ngot  %v", len(evs), want, got)
			}
		})
	}
}
