package checkpoint

import (
	"context"
	"log/slog"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Issue 43: bookmarks move checkpoints, and with 100+ idle resources one
// moves nearly every second. Those moves are written at most every
// IdleEvery; a change, a new resource or a removed one is written at once.
func TestCheckpointMovesThatAreOnlyBookmarksAreWrittenAtMostEveryIdleEvery(t *testing.T) {
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kw", Name: "cp", ResourceVersion: "1"}})
	s := &Store{leases: cs.CoordinationV1().Leases("kw"), namespace: "kw", name: "cp", log: slog.New(slog.DiscardHandler)}
	writes := func() int {
		n := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "create" || a.GetVerb() == "update" {
				n++
			}
		}
		return n
	}
	entry := func(rv, settled string) map[string]Entry {
		return map[string]Entry{"widgets.example.com": {Hash: "h", Streams: map[string]string{"": rv}, Settled: map[string]string{"": settled}}}
	}
	ctx := context.Background()
	t0 := time.Now()
	for i, step := range []struct {
		name    string
		entries map[string]Entry
		at      time.Duration
		write   bool
	}{
		{"The first checkpoint is written.", entry("10", "10"), 0, true},
		{"A bookmark's move waits.", entry("20", "10"), time.Second, false},
		{"Another bookmark's move waits too.", entry("30", "10"), 2 * time.Second, false},
		{"A change is written at once, with the bookmarks before it.", entry("31", "31"), 3 * time.Second, true},
		{"A bookmark after it waits.", entry("40", "31"), 4 * time.Second, false},
		{"A bookmark's move is written once IdleEvery has passed.", entry("50", "31"), 4*time.Second + IdleEvery, true},
		{"A checkpoint that went back (a restored etcd) is written at once.", entry("5", "31"), 4*time.Second + IdleEvery + time.Second, true},
		{"A new resource is written at once.", map[string]Entry{"other": {Hash: "h", Streams: map[string]string{"": "7"}, Settled: map[string]string{"": "7"}}}, 4*time.Second + IdleEvery + 2*time.Second, true},
	} {
		before := writes()
		// written is the real clock's: measure the steps from it.
		if err := s.turn(ctx, step.entries, t0.Add(step.at)); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := writes() > before; got != step.write {
			t.Errorf("%s wrote: %v, want %v", step.name, got, step.write)
		}
		if step.write {
			// What follows is measured from this write.
			s.written = t0.Add(step.at)
		}
	}
}
