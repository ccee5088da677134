package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// kafkaSink connects kubewire's Kafka sink to a kfake cluster, writing the
// sinktest resource to a topic of one partition, and returns the topic.
func kafkaSink(t *testing.T, addr string) (sinks.Sink, string) {
	t.Helper()
	on := true
	kc := &kafka.Config{
		Brokers: []string{addr}, Topic: "audit.{resource}", Tombstones: &on,
		CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second), DialTimeout: config.NewDuration(2 * time.Second),
	}
	s, err := kafka.New("kafka", kc, sinks.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, "audit." + sinktest.Resource.GVR.Resource
}

// send writes each change as an event; conflated ones carry the extension
// the dispatcher sets.
func send(t *testing.T, s sinks.Sink, changes []*informer.Change, conflated map[int]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, c := range changes {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := conflated[i]; ok {
			ev.SetExtension(encoding.ExtConflated, n)
		}
		if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
}

// runOnce runs the consumer until it caught up with the topic.
func runOnce(t *testing.T, addr, topic, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{addr}, topic, out, cancel)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatal("the consumer did not catch up with the topic")
	}
}

// lines reads the audit file as "kind key conflated".
func lines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		if l.Kind == "event" {
			var ev event.Event
			if err := ev.UnmarshalJSON(l.Event); err != nil {
				t.Fatalf("the line's event is not a CloudEvent: %v", err)
			}
		}
		out = append(out, l.Kind+" "+l.Key+" "+l.Conflated)
	}
	return out
}

func TestTheAuditConsumerAppendsEveryEventMarksConflatedAndGapsAndResumes(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addr := kc.ListenAddrs()[0]
	s, topic := kafkaSink(t, addr)
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	key := sinktest.Resource.ObjectKey("team-a", "a")
	c := sinktest.Change

	send(t, s, []*informer.Change{c(informer.OpAdded, "team-a", "a", 1), c(informer.OpUpdated, "team-a", "a", 5), c(informer.OpDeleted, "team-a", "a", 6)}, map[int]string{1: "3"})
	runOnce(t, addr, topic, out)
	first := []string{"event " + key + " ", "event " + key + " 3", "event " + key + " ", "tombstone " + key + " "}
	if got := lines(t, out); !reflect.DeepEqual(got, first) {
		t.Fatalf("after the first run the file holds\n%q\nwant\n%q", got, first)
	}

	// A restart appends only what is new.
	send(t, s, []*informer.Change{c(informer.OpAdded, "team-a", "b", 7)}, nil)
	runOnce(t, addr, topic, out)
	keyB := sinktest.Resource.ObjectKey("team-a", "b")
	second := append(first[:4:4], "event "+keyB+" ")
	if got := lines(t, out); !reflect.DeepEqual(got, second) {
		t.Fatalf("after a restart the file holds\n%q\nwant\n%q", got, second)
	}

	// The state kept holds the View as the run left it: b, and a deleted.
	kept := consumer.NewView(consumer.Options{})
	if err := kept.LoadStateFile(out + ".state"); err != nil {
		t.Fatal(err)
	}
	if objs := kept.Objects(""); len(objs) != 1 || objs[0].Key != keyB {
		t.Fatalf("the state kept holds %v, want only %s", objs, keyB)
	}

	// A position of an earlier version (kept without a state) that the
	// topic no longer has (it was created again) is a gap, and the
	// consumer reads on from the first offset.
	if err := os.Remove(out + ".state"); err != nil {
		t.Fatal(err)
	}
	if err := savePosition(out+".position", map[string]int64{topic + "/0": 1000}); err != nil {
		t.Fatal(err)
	}
	runOnce(t, addr, topic, out)
	third := append(append(second[:5:5], "gap  "), second...)
	if got := lines(t, out); !reflect.DeepEqual(got, third) {
		t.Fatalf("after a gap the file holds\n%q\nwant\n%q", got, third)
	}
}

func TestAWatchGapLineNamesTheRangeKubewireMayNotHaveSent(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addr := kc.ListenAddrs()[0]
	s, topic := kafkaSink(t, addr)
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	send(t, s, []*informer.Change{{Op: informer.OpGap, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix, Observed: time.Now(),
		Gap: &informer.Gap{Namespace: "team-a", From: "4", To: "9", Reason: informer.GapExpired}}}, nil)
	runOnce(t, addr, topic, out)
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if want := "in namespace team-a, changes with resourceVersion in (4, 9] may be missing (expired)"; l.Kind != "event" || l.Note != want {
		t.Errorf("the gap's line is %s, want an event line with the note %q", raw, want)
	}
}
