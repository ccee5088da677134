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

// longHistoryStart is when longHistory's first change was observed; each
// version after the first list is observed a second after the one before.
var longHistoryStart = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// longHistory is what kubewire writes for ten widgets over many snapshot
// intervals: a snapshot, then per interval fifty updates and a snapshot
// whose markers carry snapshotrv. The versions are 1..10 for the first
// list, and rise by one per update, observed at longHistoryStart plus the
// version in seconds.
func longHistory(intervals int) [][]*informer.Change {
	at := func(rv int) time.Time { return longHistoryStart.Add(time.Duration(rv) * time.Second) }
	marker := func(op informer.Op, id string, rv, count int) *informer.Change {
		v := ""
		if rv > 0 {
			v = itoa(rv)
		}
		return &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: id, SnapshotRV: v, Count: count, Observed: at(rv)}
	}
	held := map[string]int{}
	var out [][]*informer.Change
	snapshot := func(id string, rv int) {
		b := []*informer.Change{marker(informer.OpSnapshotStarted, id, rv, 0)}
		for i := range 10 {
			name := "w" + itoa(i)
			c := sinktest.Change(informer.OpSynced, "team-a", name, held[name])
			c.SnapshotID, c.Observed = id, at(rv)
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
			c := sinktest.Change(informer.OpUpdated, "team-a", name, rv)
			c.Observed = at(rv)
			b = append(b, c)
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
	// The same point as a time: the scan ends at the first started
	// marker observed after it (s2's), and the answer is for version 85.
	at := longHistoryStart.Add(85*time.Second + time.Second/2)
	h, err = consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, At: at,
		Now: func() time.Time { return at }, Lookback: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at %s: read %d records of %d", at.Format(time.RFC3339Nano), h.Read, total)
	if h.RV != 85 || h.Snapshot != "s1" {
		t.Errorf("at %s: version %d from snapshot %s, want 85 from s1", at.Format(time.RFC3339Nano), h.RV, h.Snapshot)
	}
	if limit := int64(2 * 4 * (50 + 10 + 2*3)); h.Read > limit || h.Read >= total {
		t.Errorf("read %d records of %d to answer for %s; want at most %d: the read goes on past the point", h.Read, total, at.Format(time.RFC3339Nano), limit)
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

// A kubewire killed with a change in flight sends it again after its
// restart, behind the restarted process's first started marker, which
// carries no snapshotrv (or its checkpoint): that marker must not end the
// read, though changes above the point were read before it.
func TestHistoryAtReadsOnPastTheMarkerOfARestartedKubewire(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	marker := func(op informer.Op, id string, rv int) *informer.Change {
		v := ""
		if rv > 0 {
			v = strconv.Itoa(rv)
		}
		return &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: id, SnapshotRV: v, Count: 1, Observed: time.Now()}
	}
	synced := func(name string, rv int, id string) *informer.Change {
		c := sinktest.Change(informer.OpSynced, "team-a", name, rv)
		c.SnapshotID = id
		return c
	}
	first := []*informer.Change{marker(informer.OpSnapshotStarted, "s0", 10), synced("w", 3, "s0"), marker(informer.OpSnapshotCompleted, "s0", 10)}
	// w's change at 84 was in flight when kubewire was killed; changes of
	// other objects above the point reached every partition.
	for i := range 12 {
		first = append(first, sinktest.Change(informer.OpUpdated, "team-b", "x"+strconv.Itoa(i), 86+i))
	}
	restarted := []*informer.Change{marker(informer.OpSnapshotStarted, "r1", 0), sinktest.Change(informer.OpUpdated, "team-a", "w", 84),
		synced("w", 84, "r1"), marker(informer.OpSnapshotCompleted, "r1", 97)}
	write(t, s, [][]*informer.Change{first, restarted})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, RV: 85})
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := h.View.Lookup(resource + "/team-a/w"); !ok || o.ResourceVersion != "84" {
		t.Errorf("w at 85 is %+v (held %v), want its change at 84, sent again after the restart", o.ResourceVersion, ok)
	}
}
