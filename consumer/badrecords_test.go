package consumer_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// TestBadRecordsAreReportedCountedAndNotApplied feeds the View records that
// break the contract between good ones: each must reach OnProblem with its
// position and id and why, count in Stats().Problems, and change nothing.
func TestBadRecordsAreReportedCountedAndNotApplied(t *testing.T) {
	noRV := obj(encoding.TypeUpdated, "a", "")
	noRV.ev.SetExtension(encoding.ExtResourceVersion, nil)
	noRV.ev.SetID("uid-a/updated")
	deleteNoRV := obj(encoding.TypeDeleted, "a", "")
	deleteNoRV.ev.SetExtension(encoding.ExtResourceVersion, nil)
	deleteNoRV.ev.SetID("uid-a/deleted")
	badGap := gapEvent(t, informer.Gap{From: "abc", To: "-", Reason: informer.GapExpired})
	steps := []step{
		obj(encoding.TypeAdded, "a", "5"),
		noRV,       // 1: an update with no resourceversion
		deleteNoRV, // 2: a delete with no resourceversion
		marker(encoding.TypeSnapshotStarted, "s1"),
		obj(encoding.TypeSynced, "b", "xyz", with(encoding.ExtSnapshotID, "s1")), // 4
		obj(encoding.TypeSynced, "a", "5", with(encoding.ExtSnapshotID, "s1")),
		marker(encoding.TypeSnapshotCompleted, "s1"),
		{part: "p0", ev: badGap},                     // 7: from "abc", to "-"
		marker(encoding.TypeSnapshotCompleted, "s9"), // 8: of a snapshot never started
		obj(encoding.TypeUpdated, "a", "6"),
	}
	var problems []consumer.Problem
	gaps := 0
	v := consumer.NewView(consumer.Options{
		OnProblem:  func(p consumer.Problem) { problems = append(problems, p) },
		OnWatchGap: func(consumer.WatchGap) { gaps++ },
	})
	r := &recorder{}
	v.AddEventHandler(r)
	for i, s := range steps {
		v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, s.ev)
	}

	if got := held(v); !reflect.DeepEqual(got, []string{"a@6"}) {
		t.Errorf("the view holds %v, want a@6: no bad record is applied", got)
	}
	if want := []string{"add a 5", "update a 5->6"}; !reflect.DeepEqual(r.calls, want) {
		t.Errorf("handlers saw %q, want %q", r.calls, want)
	}
	type seen struct {
		Offset  int64
		ID      string
		Reason  string
		Mention string // a part of Detail
	}
	want := []seen{
		{1, "uid-a/updated", consumer.ProblemMalformed, "no resourceversion"},
		{2, "uid-a/deleted", consumer.ProblemMalformed, "no resourceversion"},
		{4, "uid-b/xyz/synced", consumer.ProblemMalformed, `"xyz"`},
		{7, "configmaps/gap/abc--", consumer.ProblemMalformed, `"abc"`},
		{8, "s9/completed", consumer.ProblemUnmatched, "s9"},
	}
	var got []seen
	for _, p := range problems {
		s := seen{Offset: p.Position.Offset, ID: p.ID, Reason: p.Reason, Mention: p.Detail}
		for _, w := range want {
			if w.Offset == s.Offset && strings.Contains(p.Detail, w.Mention) {
				s.Mention = w.Mention
			}
		}
		got = append(got, s)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems reported:\n%+v\nwant:\n%+v", got, want)
	}
	st := v.Stats()
	if st.Problems != int64(len(want)) || st.Unmatched != 1 || st.WatchGaps != 0 || gaps != 0 {
		t.Errorf("stats %+v, OnWatchGap called %d times; want %d problems, 1 unmatched, no watch gap", st, gaps, len(want))
	}
	// The View goes on past them: the position is after the last record.
	if p := v.Position(); p["p0"] != int64(len(steps)) {
		t.Errorf("position %v, want p0 at %d", p, len(steps))
	}
}

// TestAVersionIsADecimalUnsignedInteger checks the versions the View takes
// and those it reports.
func TestAVersionIsADecimalUnsignedInteger(t *testing.T) {
	for _, tc := range []struct {
		rv   string
		good bool
	}{
		{"0", true}, {"4711", true}, {"18446744073709551615", true},
		{"", false}, {"xyz", false}, {"-1", false}, {"+1", false}, {"1.5", false}, {" 1", false},
		{"18446744073709551616", false},
	} {
		var problems []consumer.Problem
		v := consumer.NewView(consumer.Options{OnProblem: func(p consumer.Problem) { problems = append(problems, p) }})
		e := obj(encoding.TypeAdded, "a", tc.rv).ev
		v.Apply(consumer.Position{Partition: "p0"}, e)
		if took := len(v.Objects("")) == 1; took != tc.good || (len(problems) == 0) != tc.good {
			t.Errorf("resourceversion %q: held %v, problems %+v; want it held: %v", tc.rv, took, problems, tc.good)
		}
	}
}
