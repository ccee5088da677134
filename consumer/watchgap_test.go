package consumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// gapEvent is the watch.gap event kubewire writes, as sdk-go reads it.
func gapEvent(t *testing.T, g informer.Gap) *event.Event {
	t.Helper()
	r := informer.NewResource("c", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	ev, err := encoding.New(&informer.Change{Op: informer.OpGap, Resource: r, Key: r.KeyPrefix, Gap: &g, Observed: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return ev.CloudEvent()
}

func TestAWatchGapIsReportedOnceAndChangesNothingUntilTheSnapshotThatFollows(t *testing.T) {
	var gaps []consumer.WatchGap
	var problems []consumer.Problem
	v := consumer.NewView(consumer.Options{
		OnWatchGap: func(g consumer.WatchGap) { gaps = append(gaps, g) },
		OnProblem:  func(p consumer.Problem) { problems = append(problems, p) },
	})
	r := &recorder{}
	v.AddEventHandler(r)
	before := testutil.ToFloat64(consumer.WatchGapsTotal.WithLabelValues("configmaps", informer.GapExpired))
	pos := map[string]int64{}
	apply := func(part string, ev *event.Event) {
		v.Apply(consumer.Position{Partition: part, Offset: pos[part]}, ev)
		pos[part]++
	}
	apply("p0", obj(encoding.TypeAdded, "a", "10").ev)
	apply("p0", obj(encoding.TypeAdded, "b", "11").ev)
	apply("p1", obj(encoding.TypeAdded, "c", "12").ev)
	gap := gapEvent(t, informer.Gap{Namespace: "ns", From: "12", To: "20", Reason: informer.GapExpired})
	// kubewire sends it to every partition, and a restart may send it again.
	apply("p0", gap)
	apply("p1", gap)
	apply("p0", gap)
	if got := strings.Join(held(v), " "); got != "a@10 b@11 c@12" {
		t.Fatalf("after the gap the view holds %s; a gap changes nothing", got)
	}
	want := consumer.WatchGap{Position: consumer.Position{Partition: "p0", Offset: 2}, ID: "configmaps/ns/gap/12-20", Key: "configmaps",
		Gap: encoding.Gap{Version: "v1", Resource: "configmaps", Namespace: "ns", From: "12", To: "20", Reason: "expired"}}
	if len(r.calls) != 3 {
		t.Errorf("handlers got %v; a gap calls none", r.calls)
	}
	if len(gaps) != 1 || gaps[0] != want {
		t.Fatalf("OnWatchGap got %+v, want once %+v", gaps, want)
	}
	if st := v.Stats(); st.WatchGaps != 1 || st.Problems != 0 || st.Gaps != 0 || st.Duplicates != 0 {
		t.Errorf("stats %+v, want one watch gap and nothing else", st)
	}
	if got := testutil.ToFloat64(consumer.WatchGapsTotal.WithLabelValues("configmaps", informer.GapExpired)) - before; got != 1 {
		t.Errorf("kubewire_consumer_watch_gaps_total grew by %v, want 1", got)
	}
	// The snapshot that follows in p0: a changed and b was deleted during
	// the gap.
	apply("p0", marker(encoding.TypeSnapshotStarted, "s1").ev)
	apply("p0", obj(encoding.TypeSynced, "a", "15", with(encoding.ExtSnapshotID, "s1")).ev)
	apply("p0", marker(encoding.TypeSnapshotCompleted, "s1").ev)
	if got := strings.Join(held(v), " "); got != "a@15 c@12" {
		t.Errorf("after the snapshot the view holds %s", got)
	}
	if len(problems) != 0 {
		t.Errorf("problems reported: %+v", problems)
	}
}

func TestAWatchGapWhoseDataIsNotAGapIsMalformed(t *testing.T) {
	var problems []consumer.Problem
	called := false
	v := consumer.NewView(consumer.Options{
		OnWatchGap: func(consumer.WatchGap) { called = true },
		OnProblem:  func(p consumer.Problem) { problems = append(problems, p) },
	})
	gap := gapEvent(t, informer.Gap{From: "1", To: "2", Reason: informer.GapExpired})
	gap.DataEncoded = []byte(`"not a gap"`)
	v.Apply(consumer.Position{Partition: "p0"}, gap)
	if called || len(problems) != 1 || problems[0].Reason != consumer.ProblemMalformed {
		t.Errorf("OnWatchGap called %v, problems %+v; want one malformed problem", called, problems)
	}
}
