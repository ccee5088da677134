package consumer_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// longHistory is what kubewire writes for ten widgets over many snapshot
// intervals: a snapshot, then per interval fifty updates and a snapshot
// whose markers carry snapshotrv. The versions are 1..10 for the first
// list, and rise by one per update.
func longHistory(intervals int) [][]*informer.Change {
	marker := func(op informer.Op, id string, rv, count int) *informer.Change {
		v := ""
		if rv > 0 {
			v = itoa(rv)
		}
		return &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: id, SnapshotRV: v, Count: count, Observed: time.Now()}
	}
	held := map[string]int{}
	var out [][]*informer.Change
	snapshot := func(id string, rv int) {
		b := []*informer.Change{marker(informer.OpSnapshotStarted, id, rv, 0)}
		for i := range 10 {
			name := "w" + itoa(i)
			c := sinktest.Change(informer.OpSynced, "team-a", name, held[name])
			c.SnapshotID = id
			b = append(b, c)
		}
		out = append(out, b, []*informer.Change{marker(informer.OpSnapshotCompleted, id, rv, 10)})
	}
	for i := range 10 {
		held["w"+itoa(i)] = i + 1
	}
	snapshot("s0", 10)
	rv := 10
	for n := range intervals {
		var b []*informer.Change
		for range 50 {
			rv++
			name := "w" + itoa(rv%10)
			held[name] = rv
			b = append(b, sinktest.Change(informer.OpUpdated, "team-a", name, rv))
		}
		out = append(out, b)
		snapshot("s"+itoa(n+1), rv)
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

// The promise: the cost of an answer follows what lies between
// the snapshot and the point, not the length of the topic.
func TestHistoryAtStopsReadingEachPartitionOnceNothingAfterCanMatterForThePoint(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	const intervals = 40
	write(t, s, longHistory(intervals)) // 40 × (50 + 12) + 12 records
	total := int64(intervals*(50+10+2*3) + 10 + 2*3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Version 85 lies in the second interval: after snapshot s1 (at 60)
	// and before s2 (at 110).
	h, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, RV: 85})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range h.View.Objects(resource) {
		got = append(got, o.Name+"@"+o.ResourceVersion)
	}
	want := []string{"w0@80", "w1@81", "w2@82", "w3@83", "w4@84", "w5@85", "w6@76", "w7@77", "w8@78", "w9@79"}
	if h.Snapshot != "s1" || !slices.Equal(got, want) {
		t.Fatalf("from snapshot %s got %v, want %v from s1", h.Snapshot, got, want)
	}
	// Each partition can stop at the started marker of s2 (at 110), the
	// first after an update above 85. The first scan reads from the first
	// offset (the whole topic is newer than the lookback), the second
	// from s1's started marker: at most four intervals in all.
	t.Logf("read %d records of %d", h.Read, total)
	if limit := int64(2 * 4 * (50 + 10 + 2*3)); h.Read > limit || h.Read >= total {
		t.Errorf("read %d records of %d to answer for version 85; want at most %d: the read goes on past the point", h.Read, total, limit)
	}
}

// Stopping early must not change an answer: at every point, the state is
// the one a read to the end of every partition gives (a resource watched
// per namespace is read to the end).
func TestHistoryAtAnswersTheSameWhetherItStopsEarlyOrReadsToTheEnd(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	write(t, s, longHistory(6))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	state := func(h *consumer.History) []string {
		var out []string
		for _, o := range h.View.Objects(resource) {
			out = append(out, o.Name+"@"+o.ResourceVersion)
		}
		return append(out, "from "+h.Snapshot)
	}
	for rv := uint64(10); rv <= 320; rv += 31 {
		cfg := consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, RV: rv}
		early, err := consumer.HistoryAt(ctx, cfg)
		if err != nil {
			t.Fatalf("at %d: %v", rv, err)
		}
		cfg.WatchPerNamespace = true
		whole, err := consumer.HistoryAt(ctx, cfg)
		if err != nil {
			t.Fatalf("at %d, to the end: %v", rv, err)
		}
		if a, b := state(early), state(whole); !slices.Equal(a, b) {
			t.Errorf("at %d, stopping early (%d records read) gave %v; reading to the end (%d) gave %v", rv, early.Read, a, whole.Read, b)
		}
	}
}
