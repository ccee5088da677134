package kafka_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
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
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// One partition's leader stops answering (the fake broker holds every
// request to that partition) while a dispatcher with several shards writes
// changes of many objects. Every shard's batches hold objects of every
// partition; still, the other partitions must take all of their changes
// while the stalled one waits. Then the held request is appended after all
// (its Write had given up on it, so the dispatcher writes those events
// again): every change is in the topic once, in order.
func TestAStalledPartitionHoldsBackOnlyItsOwnObjects(t *testing.T) {
	const partitions, stalled = 4, 0
	sp := stallPartition(t, partitions, stalled)
	s, f, topic, partitionOf, held := sp.sink, sp.f, sp.topic, sp.partitionOf, &sp.held
	defer sp.release()

	d := dispatch.NewDispatcher("kafka-stall", s, dispatch.Options{
		Shards: 4, BatchSize: 20, RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Close(ctx)
	})

	const objects, versions = 40, 15
	want := map[int]int{} // partition -> changes written to it
	written := map[string][]int{}
	for rv := 2; rv < 2+versions; rv++ {
		for o := range objects {
			name := "cm-" + strconv.Itoa(o)
			d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpUpdated, "team-a", name, rv)))
			want[partitionOf(name)]++
			written[name] = append(written[name], rv)
		}
	}
	if want[stalled] == 0 || want[stalled] == objects*versions {
		t.Fatalf("the objects do not spread over the partitions: %v", want)
	}
	count := func() map[int]int {
		got := map[int]int{}
		for _, r := range readTopic(context.Background(), t, f.addr(), topic) {
			if string(r.key) != "" && r.headers["ce_name"] != nil && string(r.headers["ce_name"]) != "warm-up" {
				got[r.partition]++
			}
		}
		return got
	}
	start := time.Now()
	var got map[int]int
	testkit.Within(t, 10*time.Second, "the partitions that are not stalled to take every change written to them", func() bool {
		got = count()
		for p := range partitions {
			if p != stalled && got[p] < want[p] {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("the topic holds %v of %v; %d requests to the stalled partition held", got, want, held.Load())
	})
	t.Logf("the other partitions took all %d of their changes in %v while partition %d was stalled",
		objects*versions-want[stalled], time.Since(start).Round(time.Millisecond), stalled)
	if held.Load() == 0 {
		t.Fatal("no request to the stalled partition was held: the stall did not happen")
	}

	sp.release()
	testkit.Within(t, 20*time.Second, "the dispatcher to deliver everything", func() bool { return d.Queued() == 0 },
		func() string { return strconv.Itoa(d.Queued()) + " queued" })
	got = map[int]int{}
	seen := map[string][]int{}
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), topic)) {
		name := ev.Extensions()[encoding.ExtName].(string)
		if name == "warm-up" {
			continue
		}
		rv, _ := strconv.Atoi(ev.Extensions()[encoding.ExtResourceVersion].(string))
		seen[name] = append(seen[name], rv)
	}
	for name, rvs := range written {
		if !slices.Equal(seen[name], rvs) {
			t.Errorf("%s: the topic holds versions %v, want each of %v once, in order", name, seen[name], rvs)
		}
	}
}

// A Write whose events all went to the stalled partition had none
// acknowledged, yet the sink's other partitions take events: the shard
// must go on with other objects at once, not wait out the retry's backoff
// as for a broker that is down. The backoff here is an hour and each Write
// holds one event, so the first Write fails alone and only a shard that
// goes on delivers the rest.
func TestAWriteOnlyToAStalledPartitionDoesNotHoldBackTheShardsOtherObjects(t *testing.T) {
	const stalled = 0
	sp := stallPartition(t, 4, stalled)
	s, f, topic, partitionOf, held := sp.sink, sp.f, sp.topic, sp.partitionOf, &sp.held

	d := dispatch.NewDispatcher("kafka-stall-alone", s, dispatch.Options{
		Shards: 1, BatchSize: 1, RetryInitial: time.Hour, RetryMax: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d.Close(ctx)
	})
	// Before the Close above: the sink's Close waits for the held request.
	t.Cleanup(sp.release)

	// Two objects of the stalled partition: the first Write's request is
	// held until it counts as stalled, the second's fails at once, alone.
	var first []string
	others := map[string]bool{}
	for o := 0; len(first) < 2 || len(others) < 10; o++ {
		name := "cm-" + strconv.Itoa(o)
		if partitionOf(name) == stalled {
			if len(first) < 2 {
				first = append(first, name)
			}
		} else if len(others) < 10 {
			others[name] = true
		}
	}
	for _, name := range first {
		d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpUpdated, "team-a", name, 2)))
	}
	testkit.Eventually(t, "a request to the stalled partition", func() bool { return held.Load() > 0 })
	for name := range others {
		d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpUpdated, "team-a", name, 2)))
	}
	got := 0
	testkit.Within(t, 10*time.Second, "every object of the other partitions", func() bool {
		got = 0
		for _, r := range readTopic(context.Background(), t, f.addr(), topic) {
			if others[string(r.headers["ce_name"])] {
				got++
			}
		}
		return got == len(others)
	}, func() string { return fmt.Sprintf("%d of %d in the topic", got, len(others)) })
}

// stalledPartition is a sink on kfake whose produce requests to one
// partition of its topic the broker holds, unanswered, until release: the
// partition's leader has stopped answering while the others work.
type stalledPartition struct {
	f     *fakeKafka
	sink  sinks.Sink
	topic string
	// partitionOf is the partition of a team-a widget's events.
	partitionOf func(name string) int
	held        atomic.Int32 // produce requests held so far
	release     func()
}

func stallPartition(t *testing.T, partitions, stalled int) *stalledPartition {
	t.Helper()
	kafka.SetStallAfter(t, 300*time.Millisecond)
	sp := &stalledPartition{f: startFake(t)}
	s, prefix := newSink(t, sp.f.addr(), partitions, func(k *kafka.Config) {
		// Longer than the test: the stalled request is never given up by
		// its deadline, only by the broker answering at last.
		k.RequestTimeout = config.NewDuration(time.Minute)
	})
	sp.sink, sp.topic = s, widgetTopic(prefix)
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic

	bal, err := kafka.NewBalancer(kafka.BalancerMurmur2)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	sp.partitionOf = func(name string) int {
		ev := mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", name, 1))
		return bal.Balance(kafkago.Message{Key: []byte(ev.Extension(encoding.ExtPartitionKey))}, all...)
	}
	gate := make(chan struct{})
	sp.release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(sp.release)
	sp.f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		sp.f.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) == 1 && pr.Topics[0].Topic == sp.topic && pr.Topics[0].Partitions[0].Partition == int32(stalled) {
			sp.held.Add(1)
			sp.f.c.SleepControl(func() { <-gate })
		}
		return nil, nil, false
	})
	return sp
}
