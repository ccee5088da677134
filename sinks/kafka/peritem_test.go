package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// namesIn returns n object names whose keys murmur2 puts in partition p of
// parts.
func namesIn(t *testing.T, p, parts, n int, prefix string) []string {
	t.Helper()
	b, _ := kafka.NewBalancer(kafka.BalancerMurmur2)
	ids := make([]int, parts)
	for i := range ids {
		ids[i] = i
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		name := prefix + strconv.Itoa(i)
		key := sinktest.Resource.ObjectKey("team-a", name)
		if b.Balance(kafkago.Message{Key: []byte(key)}, ids...) == p {
			out = append(out, name)
		}
	}
	return out
}

// failPartition makes the broker refuse produce requests to partition p
// with NOT_LEADER_OR_FOLLOWER, which it answers before appending anything,
// while fail() holds; other partitions are served.
func failPartition(f *fakeKafka, p int32, fail func() bool) {
	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) > 0 && len(pr.Topics[0].Partitions) > 0 && pr.Topics[0].Partitions[0].Partition == p && fail() {
			return produceAnswer(req, 6), nil, true
		}
		return nil, nil, false
	})
}

func label(ev interface{ Extensions() map[string]any }) string {
	return ev.Extensions()[encoding.ExtName].(string) + "/" + ev.Extensions()[encoding.ExtResourceVersion].(string)
}

// A Write over two partitions, one of which refuses every request: the
// Write reports the refused partition's events as failed, transiently,
// and the other partition's as acknowledged. Writing the failed ones again
// once the partition is back leaves each event in the topic once, each key
// in order.
func TestAFailingPartitionFailsOnlyItsOwnEventsAndTheirRetryLandsEachOnce(t *testing.T) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 2, func(k *kafka.Config) { k.Batch = &kafka.Batch{Linger: config.NewDuration(0)} })
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic

	ok, bad := namesIn(t, 0, 2, 2, "ok-"), namesIn(t, 1, 2, 2, "bad-")
	var evs []*encoding.Event
	for rv := 1; rv <= 2; rv++ {
		for i := range 2 {
			evs = append(evs, mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", ok[i], rv)),
				mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", bad[i], rv)))
		}
	}
	var down atomic.Bool
	down.Store(true)
	failPartition(f, 1, down.Load)
	err := s.Write(context.Background(), evs)
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Len() != len(evs) {
		t.Fatalf("Write with one partition refusing = %v; want a sinks.BatchError over its %d events", err, len(evs))
	}
	var failed []*encoding.Event
	for i, ev := range evs {
		e := be.Err(i)
		inBad := strings.HasPrefix(label(ev), "bad-")
		switch {
		case inBad && (e == nil || errors.Is(e, sinks.ErrPermanent)):
			t.Errorf("%s, in the refusing partition: %v; want a transient failure", label(ev), e)
		case !inBad && e != nil:
			t.Errorf("%s, in the serving partition: %v; want it acknowledged", label(ev), e)
		}
		if e != nil {
			failed = append(failed, ev)
		}
	}
	down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, failed); err != nil {
		t.Fatalf("the retry of the failed events: %v", err)
	}
	f.c.DropControl()

	seen := map[string]int{}
	last := map[string]int{}
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
		seen[ev.ID()]++
		name := ev.Extensions()[encoding.ExtName].(string)
		rv, _ := strconv.Atoi(ev.Extensions()[encoding.ExtResourceVersion].(string))
		if rv < last[name] {
			t.Errorf("%s: rv %d after %d", name, rv, last[name])
		}
		last[name] = rv
	}
	for _, ev := range evs {
		if seen[ev.ID()] != 1 {
			t.Errorf("%s is in the topic %d times, want once", label(ev), seen[ev.ID()])
		}
	}
}

// An event too large for the topic even as its reference (a snapshot
// marker has none) is refused alone: the events around it in its
// partition still go out, and the Write names the refused one.
func TestAnEventRefusedEvenAsAReferenceFailsAloneAndTheRestOfItsPartitionGoesOut(t *testing.T) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 1, nil)
	newTopic(t, f.addr(), widgetTopic(prefix), 1, kafkago.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "4000"})
	connect(t, s)
	huge := &informer.Change{Op: informer.OpSnapshotStarted, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
		SnapshotID: strings.Repeat("s", 10000), Observed: time.Now()}
	evs := []*encoding.Event{
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "small", 1)),
		mustEvent(t, huge),
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "small", 2)),
	}
	err := s.Write(context.Background(), evs)
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Len() != 3 {
		t.Fatalf("Write = %v; want a sinks.BatchError over its 3 events", err)
	}
	if e := be.Err(1); !errors.Is(e, sinks.ErrPermanent) || !errors.Is(e, sinks.ErrTooLarge) {
		t.Errorf("the huge marker failed with %v; want a permanent, too-large refusal", e)
	}
	for _, i := range []int{0, 2} {
		if e := be.Err(i); e != nil {
			t.Errorf("%s failed with %v; want it acknowledged", label(evs[i]), e)
		}
	}
	if got := names(t, f.addr(), widgetTopic(prefix)); got != "small/1,small/2" {
		t.Errorf("the topic holds %s, want small/1,small/2", got)
	}
}

// recordingSink keeps the events of every Write, as the dispatcher sent
// them.
type recordingSink struct {
	sinks.Sink
	mu     sync.Mutex
	writes [][]string
}

func (r *recordingSink) Write(ctx context.Context, evs []*encoding.Event) error {
	var ls []string
	for _, ev := range evs {
		ls = append(ls, label(ev))
	}
	r.mu.Lock()
	r.writes = append(r.writes, ls)
	r.mu.Unlock()
	return r.Sink.Write(ctx, evs)
}

// Through the dispatcher: while one partition refuses its first requests,
// the dispatcher writes again only the events of that partition, and the
// topic ends with each event once, each key in order.
func TestThroughTheDispatcherOnlyTheEventsOfAFailingPartitionAreWrittenAgain(t *testing.T) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 2, func(k *kafka.Config) { k.Batch = &kafka.Batch{Linger: config.NewDuration(0)} })
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
	var refusals atomic.Int32
	failPartition(f, 1, func() bool { return refusals.Add(1) <= 2 })

	rec := &recordingSink{Sink: s}
	d := dispatch.NewDispatcher("kafka-test", rec, dispatch.Options{Shards: 1, BatchSize: 100,
		RetryInitial: time.Millisecond, RetryMax: 10 * time.Millisecond})
	ok, bad := namesIn(t, 0, 2, 3, "ok-"), namesIn(t, 1, 2, 3, "bad-")
	var want []*encoding.Event
	for rv := 1; rv <= 3; rv++ {
		for i := range 3 {
			for _, name := range []string{ok[i], bad[i]} {
				c := sinktest.Change(informer.OpUpdated, "team-a", name, rv)
				d.Enqueue(dispatch.NewItem(c))
				want = append(want, mustEvent(t, c))
			}
		}
	}
	d.Start() // after the Enqueues, so that the first Write holds one of each key
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	f.c.DropControl()

	rec.mu.Lock()
	writes := rec.writes
	rec.mu.Unlock()
	// A Write holds one event of each key, so the first holds every
	// object's rv 1.
	if len(writes) < 2 || len(writes[0]) != len(want)/3 {
		t.Fatalf("writes %v; want a first Write of the %d objects' first events, then more", writes, len(want)/3)
	}
	written := map[string]bool{}
	for _, w := range writes {
		for _, l := range w {
			if written[l] && !strings.HasPrefix(l, "bad-") {
				t.Errorf("a retry %v holds %s, which its partition acknowledged the first time", w, l)
			}
			written[l] = true
		}
	}
	seen := map[string]int{}
	last := map[string]int{}
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
		seen[ev.ID()]++
		name := ev.Extensions()[encoding.ExtName].(string)
		rv, _ := strconv.Atoi(ev.Extensions()[encoding.ExtResourceVersion].(string))
		if rv < last[name] {
			t.Errorf("%s: rv %d after %d", name, rv, last[name])
		}
		last[name] = rv
	}
	for _, ev := range want {
		if seen[ev.ID()] != 1 {
			t.Errorf("%s is in the topic %d times, want once", label(ev), seen[ev.ID()])
		}
	}
}
