package kafka_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// A snapshot marker goes to every partition of its topic. When one
// partition fails it (here NOT_ENOUGH_REPLICAS, as a partition answered
// right after its topic was created), the dispatcher writes the marker
// again; the partitions that acknowledged it the first time must not get a
// second copy, and the one that failed must get exactly one.
func TestAMarkerWrittenAgainAfterOnePartitionFailedReachesEachPartitionOnce(t *testing.T) {
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), func(k *kafka.Config) { k.CreateTopics.Partitions = 3 })
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
	topic := widgetTopic(prefix)

	var refused atomic.Bool
	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		if !refused.Load() && len(pr.Topics) == 1 && len(pr.Topics[0].Partitions) == 1 && pr.Topics[0].Partitions[0].Partition == 2 {
			refused.Store(true)
			return produceAnswer(req, 19), nil, true // NOT_ENOUGH_REPLICAS, once
		}
		f.c.KeepControl()
		return nil, nil, false
	})
	started := mustEvent(t, &informer.Change{Op: informer.OpSnapshotStarted, Resource: sinktest.Resource,
		Key: sinktest.Resource.KeyPrefix, SnapshotID: "s1", Observed: time.Now()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, []*encoding.Event{started}); err == nil {
		t.Fatal("a marker that one partition refused was reported written")
	}
	// The dispatcher's retry: the same event again.
	if err := s.Write(ctx, []*encoding.Event{started}); err != nil {
		t.Fatalf("the retry of the marker failed: %v", err)
	}
	perPartition := map[int]int{}
	for _, r := range readTopic(ctx, t, f.addr(), topic) {
		if string(r.headers["ce_type"]) == encoding.TypeSnapshotStarted {
			perPartition[r.partition]++
		}
	}
	if got := fmt.Sprint(perPartition); got != "map[0:1 1:1 2:1]" {
		t.Errorf("snapshot.started markers per partition: %s, want one in each of the 3", got)
	}
}

// A gap is a marker too: a consumer of any partition must hear that
// changes may be missing, so it goes to every partition of the topic, once.
func TestAGapGoesToEveryPartitionOfItsTopic(t *testing.T) {
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), func(k *kafka.Config) { k.CreateTopics.Partitions = 3 })
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
	gap := mustEvent(t, &informer.Change{Op: informer.OpGap, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
		Gap: &informer.Gap{From: "1", To: "9", Reason: informer.GapExpired}, Observed: time.Now()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, []*encoding.Event{gap}); err != nil {
		t.Fatal(err)
	}
	perPartition := map[int]int{}
	for _, r := range readTopic(ctx, t, f.addr(), widgetTopic(prefix)) {
		if string(r.headers["ce_type"]) == encoding.TypeGap {
			perPartition[r.partition]++
		}
	}
	if got := fmt.Sprint(perPartition); got != "map[0:1 1:1 2:1]" {
		t.Errorf("gaps per partition: %s, want one in each of the 3", got)
	}
}
