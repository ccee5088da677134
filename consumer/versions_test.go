package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// writeEvents encodes the changes and writes them with kubewire's sink;
// ref turns the change at that resourceVersion into a reference event.
func writeEvents(t *testing.T, s sinks.Sink, ref int, changes ...*informer.Change) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range changes {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if c.Object != nil && ev.Extension(encoding.ExtResourceVersion) == fmt.Sprint(ref) {
			if ev, err = encoding.ReferenceEvent(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
}

// by is a change of widget team-a/<name> at rv written by the field
// manager.
func by(op informer.Op, name string, rv int, manager string) *informer.Change {
	u := sinktest.Object("team-a", name, rv)
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
		Time: &metav1.Time{Time: time.Date(2026, 11, 29, 10, 0, rv, 0, time.UTC)}}})
	return sinktest.ChangeOf(op, u)
}

func snapMarker(op informer.Op, id string, rv int) *informer.Change {
	r := sinktest.Resource
	return &informer.Change{Op: op, Resource: r, Key: r.KeyPrefix, SnapshotID: id, SnapshotRV: fmt.Sprint(rv), Count: 1, Observed: time.Now()}
}

func gapChange(from, to string) *informer.Change {
	r := sinktest.Resource
	return &informer.Change{Op: informer.OpGap, Resource: r, Key: r.KeyPrefix, Observed: time.Now(),
		Gap: &informer.Gap{From: from, To: to, Reason: informer.GapExpired}}
}

func versionsOf(vs *consumer.ObjectVersions) []string {
	if vs == nil {
		return nil
	}
	var out []string
	for _, v := range vs.Versions {
		out = append(out, fmt.Sprintf("%s %d %s", v.Type, v.RV, v.ChangedBy))
	}
	return out
}

func TestVersionsReturnsEachVersionOfOneObjectInTheRangeWithItsFieldManager(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, "binary")
	writeEvents(t, s, 0,
		snapMarker(informer.OpSnapshotStarted, "s1", 1), by(informer.OpSynced, "a", 1, "creator"), snapMarker(informer.OpSnapshotCompleted, "s1", 1),
		by(informer.OpUpdated, "a", 2, "writer-x"), by(informer.OpUpdated, "b", 3, "writer-x"),
		by(informer.OpUpdated, "a", 4, "writer-y"),
		by(informer.OpUpdated, "a", 4, "writer-y"), // redelivered
		by(informer.OpUpdated, "a", 6, "writer-x"),
		by(informer.OpDeleted, "a", 7, ""),
	)
	key := sinktest.Resource.ObjectKey("team-a", "a")
	cfg := consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key, SinceRV: 2, UntilRV: 6}
	vs, err := consumer.Versions(context.Background(), cfg)
	if want := []string{"updated 2 writer-x", "updated 4 writer-y", "updated 6 writer-x"}; err != nil || !slices.Equal(versionsOf(vs), want) {
		t.Fatalf("Versions(%d, %d]: %v, %v; want %v", cfg.SinceRV-1, cfg.UntilRV, versionsOf(vs), err, want)
	}
	if vs.Before == nil || vs.Before.RV != 1 || vs.Before.Type != "synced" {
		t.Errorf("Before is %+v, want the snapshot record at 1", vs.Before)
	}
	cfg.SinceRV, cfg.UntilRV = 5, 0
	vs, err = consumer.Versions(context.Background(), cfg)
	if want := []string{"updated 6 writer-x", "deleted 7 "}; err != nil || !slices.Equal(versionsOf(vs), want) {
		t.Errorf("Versions from 5: %v, %v; want %v", versionsOf(vs), err, want)
	}
}

func TestVersionsSaysWithTypedErrorsWhatTheStreamCannotVouchFor(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, "binary")
	writeEvents(t, s, 5,
		snapMarker(informer.OpSnapshotStarted, "s1", 1), by(informer.OpSynced, "a", 1, "creator"), snapMarker(informer.OpSnapshotCompleted, "s1", 1),
		by(informer.OpUpdated, "a", 2, "writer-x"),
		gapChange("3", "4"),
		by(informer.OpUpdated, "a", 5, "writer-x"), // as a reference
	)
	key := sinktest.Resource.ObjectKey("team-a", "a")
	for _, tc := range []struct {
		name         string
		since, until uint64
		want         []string
		is           []error
	}{
		{"a range before the gap", 2, 3, []string{"updated 2 writer-x"}, nil},
		{"a range that the gap overlaps", 2, 4, []string{"updated 2 writer-x"}, []error{consumer.ErrWatchGapInRange}},
		{"a range after the gap with a reference in it", 5, 5, []string{"updated 5 writer-x"}, []error{consumer.ErrReferencePayload}},
		{"both", 0, 0, []string{"synced 1 creator", "updated 2 writer-x", "updated 5 writer-x"}, []error{consumer.ErrWatchGapInRange, consumer.ErrReferencePayload}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, err := consumer.Versions(context.Background(), consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key, SinceRV: tc.since, UntilRV: tc.until})
			if !slices.Equal(versionsOf(vs), tc.want) {
				t.Errorf("versions %v, want %v (err %v)", versionsOf(vs), tc.want, err)
			}
			if len(tc.is) == 0 && err != nil {
				t.Errorf("err %v, want none", err)
			}
			for _, e := range tc.is {
				if !errors.Is(err, e) {
					t.Errorf("err %v, want errors.Is %v", err, e)
				}
			}
		})
	}
}

func TestVersionsRefusesARangeWhoseStartRetentionDropped(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, "binary")
	writeEvents(t, s, 0,
		snapMarker(informer.OpSnapshotStarted, "s1", 1), by(informer.OpSynced, "a", 1, "creator"), snapMarker(informer.OpSnapshotCompleted, "s1", 1),
		by(informer.OpUpdated, "a", 2, "writer-x"), by(informer.OpUpdated, "a", 3, "writer-x"),
	)
	// Retention: each partition's first record (the started marker) goes.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	for p := range int32(3) {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = p, 1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("delete records of partition %d: error %d", p.Partition, p.ErrorCode)
		}
	}
	key := sinktest.Resource.ObjectKey("team-a", "a")
	_, err = consumer.Versions(context.Background(), consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key, SinceRV: 3})
	if !errors.Is(err, consumer.ErrNoSnapshot) {
		t.Errorf("from 3, with the snapshot's started marker gone: err %v, want ErrNoSnapshot", err)
	}
	// Without a start, the range is what the topic keeps.
	vs, err := consumer.Versions(context.Background(), consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key})
	if want := []string{"synced 1 creator", "updated 2 writer-x", "updated 3 writer-x"}; err != nil || !slices.Equal(versionsOf(vs), want) {
		t.Errorf("without a start: %v, %v; want %v", versionsOf(vs), err, want)
	}
}

// The cost of one object's versions up to an end follows what lies before
// the end, not the length of the topic or stream: each partition stops as
// HistoryAt does for a point at the end.
func TestVersionsStopsReadingEachPartitionOnceNothingAfterCanBeInTheRange(t *testing.T) {
	const intervals = 40
	total := int64(intervals*(50+10+2*3) + 10 + 2*3)
	key := sinktest.Resource.ObjectKey("team-a", "w5")
	// w5 is listed at 6 and updated at 15, 25, ... (every tenth version).
	want := []string{"synced 6"}
	for rv := 15; rv <= 85; rv += 10 {
		want = append(want, fmt.Sprintf("updated %d", rv))
	}
	// Version 85 lies in the second interval: each partition can stop at
	// the started marker of s2 (at 110), the first after an update above
	// 85, so the scan reads the first snapshot and at most three
	// intervals. A time ends the scan at the first started marker
	// observed after it, s2's too.
	until := longHistoryStart.Add(85*time.Second + time.Second/2)
	check := func(t *testing.T, versions func(ctx context.Context, untilRV uint64, until time.Time) (*consumer.ObjectVersions, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, end := range []struct {
			rv uint64
			at time.Time
		}{{rv: 85}, {at: until}} {
			vs, err := versions(ctx, end.rv, end.at)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs.Versions {
				got = append(got, fmt.Sprintf("%s %d", v.Type, v.RV))
			}
			if !slices.Equal(got, want) {
				t.Errorf("versions of %s up to %d / %s: %v, want %v", key, end.rv, end.at.Format(time.RFC3339Nano), got, want)
			}
			t.Logf("up to %d / %s: read %d records of %d", end.rv, end.at.Format(time.RFC3339Nano), vs.Read, total)
			if limit := int64(4 * (50 + 10 + 2*3)); vs.Read > limit {
				t.Errorf("read %d records of %d for the versions up to %d / %s; want at most %d: the read goes on past the end of the range",
					vs.Read, total, end.rv, end.at.Format(time.RFC3339Nano), limit)
			}
		}
	}
	t.Run("kafka", func(t *testing.T) {
		addr := startKfake(t)
		s, topic := kafkaSink(t, addr, "binary")
		write(t, s, longHistory(intervals))
		check(t, func(ctx context.Context, untilRV uint64, until time.Time) (*consumer.ObjectVersions, error) {
			return consumer.Versions(ctx, consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key, UntilRV: untilRV, Until: until})
		})
	})
	t.Run("jetstream", func(t *testing.T) {
		url, js := startNATS(t)
		write(t, natsSink(t, url, "binary", "KW"), longHistory(intervals))
		check(t, func(ctx context.Context, untilRV uint64, until time.Time) (*consumer.ObjectVersions, error) {
			return consumer.VersionsJetStream(ctx, consumer.JetStreamVersionsConfig{JetStream: js, Stream: "KW", Key: key, UntilRV: untilRV, Until: until})
		})
	})
}

// Stopping early must not change an answer: up to every end, the versions
// are those a read to the end of every partition gives (a resource watched
// per namespace is read to the end).
func TestVersionsAnswersTheSameWhetherItStopsEarlyOrReadsToTheEnd(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, "binary")
	write(t, s, longHistory(4))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Ends in the first list, inside intervals, at and around snapshots
	// (at 10, 60, 110, 160, 210).
	key := sinktest.Resource.ObjectKey("team-a", "w7")
	for _, end := range []uint64{1, 10, 11, 37, 60, 61, 109, 110, 187, 210, 211} {
		cfg := consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: key, UntilRV: end}
		early, err := consumer.Versions(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.WatchPerNamespace = true
		whole, err := consumer.Versions(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := versionsOf(early), versionsOf(whole); !slices.Equal(a, b) || early.Read > whole.Read {
			t.Errorf("%s up to %d: stopping early (%d records read) gave %v; reading to the end (%d) gave %v", key, end, early.Read, a, whole.Read, b)
		}
	}
}
