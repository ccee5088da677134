package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// fakeKafka is kfake persisting to a directory, so that a restart at the
// same port keeps the data, as a real broker's would.
type fakeKafka struct {
	mu   sync.Mutex
	c    *kfake.Cluster
	port int
	dir  string
}

func startFake(t testing.TB) *fakeKafka {
	t.Helper()
	f := &fakeKafka{port: testkit.FreePort(t), dir: t.TempDir()}
	f.start(t)
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.c.Close()
	})
	return f
}

func (f *fakeKafka) start(t testing.TB) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(f.port), kfake.DataDir(f.dir), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	f.c = c
}

func (f *fakeKafka) addr() string { return "127.0.0.1:" + strconv.Itoa(f.port) }

func (f *fakeKafka) restart(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c.Close()
	f.start(t)
}

func TestConformanceOnKfake(t *testing.T) {
	f := startFake(t)
	sinktest.Run(t, harness(f.addr, 3, f.restart).Harness())
}

func TestStructuredModeConformanceOnKfake(t *testing.T) {
	f := startFake(t)
	h := harness(f.addr, 2, nil)
	h.Edit = func(k *kafka.Config) { k.ContentMode = config.ContentModeStructured }
	sinktest.Run(t, h.Harness())
}

func connect(t *testing.T, s sinks.Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
}

func write(t *testing.T, s sinks.Sink, evs ...*informer.Change) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var batch = make([]*encoding.Event, 0, len(evs))
	for _, c := range evs {
		batch = append(batch, mustEvent(t, c))
	}
	if err := s.Write(ctx, batch); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func widgetTopic(prefix string) string { return suiteTopics(prefix)[0] }

func TestATombstoneFollowsEachDeleteWithTheSameKeyAndPartition(t *testing.T) {
	f := startFake(t)
	for _, on := range []bool{true, false} {
		t.Run("tombstones="+strconv.FormatBool(on), func(t *testing.T) {
			s, prefix := newSink(t, f.addr(), 4, func(k *kafka.Config) { k.Tombstones = &on })
			connect(t, s)
			write(t, s,
				sinktest.Change(informer.OpAdded, "team-a", "gone", 1),
				sinktest.Change(informer.OpAdded, "team-a", "stays", 2),
				sinktest.Change(informer.OpDeleted, "team-a", "gone", 3),
			)
			ctx := context.Background()
			rs := readTopic(ctx, t, f.addr(), widgetTopic(prefix))
			key := "widgets.demo.kubewire.io/team-a/gone"
			var ofKey []rawRecord
			for _, r := range rs {
				if string(r.key) == key {
					ofKey = append(ofKey, r)
				}
			}
			want := 2
			if on {
				want = 3
			}
			if len(ofKey) != want {
				t.Fatalf("%d records for %s, want %d: %+v", len(ofKey), key, want, ofKey)
			}
			if !on {
				return
			}
			last, del := ofKey[2], ofKey[1]
			if last.value != nil || len(last.headers) != 0 {
				t.Errorf("the tombstone has value %q and headers %v; want a null value and no headers", last.value, last.headers)
			}
			if last.partition != del.partition || last.offset != del.offset+1 {
				t.Errorf("tombstone at %d@%d, delete at %d@%d: want right after the delete in its partition",
					last.partition, last.offset, del.partition, del.offset)
			}
			if string(del.headers["ce_type"]) != encoding.TypeDeleted {
				t.Errorf("the record before the tombstone is %s, want the deleted event", del.headers["ce_type"])
			}
		})
	}
}

func TestSnapshotMarkersGoToEveryPartitionAndObjectsToTheirKeysPartition(t *testing.T) {
	f := startFake(t)
	const parts = 5
	s, prefix := newSink(t, f.addr(), parts, nil)
	connect(t, s)
	started := &informer.Change{Op: informer.OpSnapshotStarted, Resource: sinktest.Resource,
		Key: sinktest.Resource.KeyPrefix, SnapshotID: "snap-9", Observed: time.Now()}
	var changes []*informer.Change
	for i := range 20 {
		changes = append(changes, sinktest.Change(informer.OpSynced, "team-a", "cm-"+strconv.Itoa(i), 5))
	}
	write(t, s, started)
	write(t, s, changes...)

	rs := readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))
	b, _ := kafka.NewBalancer(kafka.BalancerMurmur2)
	markers := map[int]int{}
	for _, r := range rs {
		if string(r.headers["ce_type"]) == encoding.TypeSnapshotStarted {
			markers[r.partition]++
			continue
		}
		want := b.Balance(kafkago.Message{Key: r.key}, 0, 1, 2, 3, 4)
		if r.partition != want {
			t.Errorf("key %s in partition %d, murmur2 says %d", r.key, r.partition, want)
		}
	}
	for p := range parts {
		if markers[p] != 1 {
			t.Errorf("partition %d holds %d snapshot.started markers, want 1", p, markers[p])
		}
	}
}

func TestAnOversizedEventFallsBackToAReferenceAndThePartitionKeepsFlowing(t *testing.T) {
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			f := startFake(t)
			s, prefix := newSink(t, f.addr(), 1, func(k *kafka.Config) { k.ContentMode = mode })
			// Create the topic with a small limit before the sink does.
			c := &kafkago.Client{Addr: kafkago.TCP(f.addr()), Timeout: 10 * time.Second}
			res, err := c.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
				Topic: widgetTopic(prefix), NumPartitions: 1, ReplicationFactor: 1,
				ConfigEntries: []kafkago.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "4000"}},
			}}})
			if err != nil || res.Errors[widgetTopic(prefix)] != nil {
				t.Fatalf("create topic: %v %v", err, res.Errors)
			}
			connect(t, s)

			bigObject := sinktest.Object("team-a", "big", 2)
			bigObject.Object["spec"] = map[string]any{"blob": strings.Repeat("x", 10000)}
			big := sinktest.ChangeOf(informer.OpUpdated, bigObject)
			before := testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference"))
			write(t, s,
				sinktest.Change(informer.OpUpdated, "team-a", "small-1", 1),
				big,
				sinktest.Change(informer.OpUpdated, "team-a", "small-2", 3),
			)
			records := readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))
			evs := decodeRecords(t, records)
			var names []string
			for i, ev := range evs {
				n, _ := ev.Extensions()[encoding.ExtName].(string)
				if p, _ := ev.Extensions()[encoding.ExtPayload].(string); p != "" {
					n += "(" + p + ")"
					if ev.ID() != mustEvent(t, big).ID() {
						t.Errorf("the reference event has id %s, want the full event's %s", ev.ID(), mustEvent(t, big).ID())
					}
					sinktest.ReferenceData(t, mode == config.ContentModeStructured, records[i].value)
				}
				names = append(names, n)
			}
			if got, want := strings.Join(names, ","), "small-1,big(reference),small-2"; got != want {
				t.Errorf("the topic holds %s, want %s", got, want)
			}
			if d := testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference")) - before; d != 1 {
				t.Errorf("kubewire_kafka_oversized_events_total{action=reference} grew by %v, want 1", d)
			}
		})
	}
}

func TestAWriteThatGivesUpBeforeItsRequestIsSentNeverLands(t *testing.T) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 1, func(k *kafka.Config) {
		k.Batch = &kafka.Batch{Linger: config.NewDuration(0)}
	})
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic

	// Hold the next produce request at the broker, so the partition has one
	// request in flight and the next Write has to queue behind it.
	held := make(chan struct{})
	release := make(chan struct{})
	f.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		f.c.DropControl()
		close(held)
		f.c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	first := make(chan error, 1)
	go func() {
		first <- s.Write(context.Background(), []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))})
	}()
	<-held

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Write(ctx, []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "withdrawn", 3))})
	if err == nil {
		t.Fatal("a Write whose context ended while it was queued reported success")
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the held Write failed: %v", err)
	}
	// One more Write goes through the same partition after the withdrawn one
	// would have: if the withdrawn records were still queued, they would go
	// out before it.
	write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "after", 4))
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
		if ev.Extensions()[encoding.ExtName] == "withdrawn" {
			t.Fatal("the withdrawn event landed after its Write had returned an error")
		}
	}
}
