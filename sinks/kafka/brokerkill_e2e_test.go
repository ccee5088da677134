//go:build e2e

package kafka_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Objects change without pause while the real broker is killed with
// SIGKILL three times and restarted on the same data. A request on the wire
// when the broker dies may have been appended with its answer lost; the
// dispatcher then retries its Write. Afterwards the topic must hold every
// object's last change, no event id twice, and each object's
// resourceVersions in increasing order.
func TestE2EABrokerKilledWhileWritingLeavesNoDuplicateEventAndEveryKeyInOrder(t *testing.T) {
	b := kafkatest.Start(t, nil)
	s, prefix := newSink(t, b.Addr, 3, func(k *kafka.Config) {
		k.RequestTimeout = config.NewDuration(5 * time.Second)
	})
	topic := widgetTopic(prefix)
	d := dispatch.NewDispatcher("kafka-test", s, dispatch.Options{
		Shards:       4,
		BatchSize:    20,
		RetryInitial: 20 * time.Millisecond,
		RetryMax:     500 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	})
	d.Start()

	const keys = 40
	var mu sync.Mutex
	last := map[string]int{} // key -> last resourceVersion enqueued
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		// About 2,000 changes a second, spread over the keys: steady
		// load, so a produce request is on the wire when the broker dies.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for rv := 1; ; rv++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i := range 2 {
				k := (2*rv + i) % keys
				c := sinktest.Change(informer.OpUpdated, "team-a", "cm-"+strconv.Itoa(k), rv)
				// The record timestamp is the event's time. A restarted
				// broker forgets producers whose newest record is older than
				// producer.id.expiration.ms (a day), and with them what it
				// needs to spot a duplicate; the suite's fixed time is older.
				c.Observed = time.Now()
				mu.Lock()
				last[c.Key] = rv
				mu.Unlock()
				d.Enqueue(dispatch.NewItem(c))
			}
		}
	}()

	acked := func() float64 {
		return metrics.Sum("kubewire_kafka_records_total", map[string]string{"sink": "kafka-test"})
	}
	for kill := 1; kill <= 3; kill++ {
		mark := acked()
		testkit.Within(t, time.Minute, "records to flow before kill "+strconv.Itoa(kill), func() bool { return acked() > mark+500 })
		b.Restart(t) // SIGKILL, then start again on the same data
	}
	mark := acked()
	testkit.Within(t, time.Minute, "records to flow after the last restart", func() bool { return acked() > mark+500 })
	close(stop)
	<-churned
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("the dispatcher could not deliver %d events", n)
	}

	rs := readTopic(ctx, t, b.Addr, topic)
	ids := map[string]int{}
	var duplicates, violations int
	newest := map[string]int{}
	for _, r := range rs {
		id := string(r.headers["ce_id"])
		if ids[id]++; ids[id] > 1 {
			duplicates++
		}
		key := string(r.key)
		rv, err := strconv.Atoi(string(r.headers["ce_resourceversion"]))
		if err != nil {
			t.Fatalf("record %s[%d]@%d has resourceversion %q", r.topic, r.partition, r.offset, r.headers["ce_resourceversion"])
		}
		// A copy of the newest event right after it is a duplicate; anything
		// older than the newest is out of order, repeated or not.
		if rv < newest[key] {
			if violations++; violations <= 10 {
				t.Errorf("key %s: resourceVersion %d at %d@%d after %d", key, rv, r.partition, r.offset, newest[key])
			}
		}
		newest[key] = max(newest[key], rv)
	}
	mu.Lock()
	for key, rv := range last {
		if newest[key] != rv {
			t.Errorf("key %s ends at resourceVersion %d in the topic, its last change was %d", key, newest[key], rv)
		}
	}
	mu.Unlock()
	resends := metrics.Sum("kubewire_kafka_produce_resends_total", map[string]string{"sink": "kafka-test"})
	t.Logf("3 broker kills: %d records, %d distinct events, %d duplicates, %d order violations, %v requests resent",
		len(rs), len(ids), duplicates, violations, resends)
	if duplicates != 0 {
		t.Errorf("the topic holds %d duplicate events", duplicates)
	}
}
