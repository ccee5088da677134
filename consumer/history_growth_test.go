package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// grownHistory writes what kubewire writes for twelve widgets while their
// topic grows from 3 partitions to 6 between two snapshots: before the
// growth, a snapshot, updates, a delete of w3 (event and tombstone) and a
// snapshot; after it, through a sink that knows 6 partitions, updates
// that move keys to their new partitions, w3 created again under a new
// uid, and two more snapshots. It returns, per version written, the
// cluster's state at that version, as name@rv#uid sorted, the versions
// of w3, as type@rv#uid, and the versions of the snapshots, the delete,
// the growth and the re-creation.
//
// With midWindow, kubewire learns of the growth while it writes snapshot
// s1: its started marker is in the first 3 partitions only, its records
// and its completed marker go where the keys hash among 6.
func grownHistory(midWindow bool, before, after func([][]*informer.Change)) (states map[int][]string, w3 []string, notable []int) {
	at := func(rv int) time.Time { return longHistoryStart.Add(time.Duration(rv) * time.Second) }
	type held struct {
		rv  int
		uid string
	}
	cluster := map[string]held{}
	states = map[int][]string{}
	record := func(rv int) {
		var s []string
		for name, h := range cluster {
			s = append(s, fmt.Sprintf("%s@%d#%s", name, h.rv, h.uid))
		}
		slices.Sort(s)
		states[rv] = s
	}
	change := func(op informer.Op, name string, rv int, uid string, id string) *informer.Change {
		o := sinktest.Object("team-a", name, rv)
		o.SetUID(k8stypes.UID(uid))
		c := sinktest.ChangeOf(op, o)
		c.Observed, c.SnapshotID = at(rv), id
		// A snapshot record is one of w3's versions only where no event
		// carried that version: here, the first list.
		if name == "w3" && (op != informer.OpSynced || id == "s0") {
			w3 = append(w3, fmt.Sprintf("%s@%d#%s", op, rv, uid))
		}
		return c
	}
	snapshot := func(id string, rv int) [][]*informer.Change {
		m := func(op informer.Op, n int) *informer.Change {
			return &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
				SnapshotID: id, SnapshotRV: itoa(rv), Count: n, Observed: at(rv)}
		}
		b := []*informer.Change{m(informer.OpSnapshotStarted, 0)}
		for _, name := range slices.Sorted(maps.Keys(cluster)) {
			h := cluster[name]
			b = append(b, change(informer.OpSynced, name, h.rv, h.uid, id))
		}
		notable = append(notable, rv)
		return [][]*informer.Change{b, {m(informer.OpSnapshotCompleted, len(b)-1)}}
	}
	uid := func(name string) string { return "uid-team-a-" + name }
	rv := 0
	for i := range 12 {
		rv++
		name := "w" + itoa(i)
		cluster[name] = held{rv, uid(name)}
		record(rv)
	}
	updates := func(n int, skip string) [][]*informer.Change {
		var b []*informer.Change
		for range n {
			rv++
			name := "w" + itoa(rv%12)
			if name == skip {
				continue
			}
			h := cluster[name]
			cluster[name] = held{rv, h.uid}
			b = append(b, change(informer.OpUpdated, name, rv, h.uid, ""))
			record(rv)
		}
		return [][]*informer.Change{b}
	}
	var pre [][]*informer.Change
	pre = append(pre, snapshot("s0", rv)...)
	pre = append(pre, updates(24, "")...)
	rv++
	pre = append(pre, []*informer.Change{change(informer.OpDeleted, "w3", rv, uid("w3"), "")})
	notable = append(notable, rv)
	delete(cluster, "w3")
	record(rv)
	pre = append(pre, updates(23, "w3")...)
	s1 := snapshot("s1", rv)
	var post [][]*informer.Change
	if midWindow {
		pre = append(pre, s1[0][:1])
		post = append(post, s1[0][1:], s1[1])
	} else {
		pre = append(pre, s1...)
	}
	before(pre)
	notable = append(notable, rv)

	post = append(post, updates(10, "w3")...)
	rv++
	cluster["w3"] = held{rv, "uid-team-a-w3-again"}
	post = append(post, []*informer.Change{change(informer.OpAdded, "w3", rv, "uid-team-a-w3-again", "")})
	notable = append(notable, rv)
	record(rv)
	post = append(post, updates(30, "")...)
	post = append(post, snapshot("s2", rv)...)
	post = append(post, updates(30, "")...)
	post = append(post, snapshot("s3", rv)...)
	after(post)
	return states, w3, notable
}

// A topic grown between two snapshots (issue 44 with issue 41's growth):
// at every point, kubewire history gives the cluster's state at that
// version, whether it stops reading each partition early or reads to the
// end, and the versions of an object deleted before the growth and created
// again after it are each of its versions once, in order, though they lie
// in two partitions.
func TestHistoryAtAndVersionsGiveTheClusterAsItWasAcrossATopicThatGrew(t *testing.T) {
	for _, tc := range []struct {
		name      string
		midWindow bool
		every     int
	}{
		{"between two snapshots", false, 5},
		{"while a snapshot is written", true, 10},
	} {
		t.Run(tc.name, func(t *testing.T) { historyAcrossAGrowth(t, tc.midWindow, tc.every) })
	}
}

func historyAcrossAGrowth(t *testing.T, midWindow bool, every int) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Its own transport: kafka-go's default one caches metadata, and
	// would go on answering with 3 partitions.
	client := &kafkago.Client{Addr: kafkago.TCP(addr), Transport: &kafkago.Transport{}}
	states, w3, notable := grownHistory(midWindow, func(b [][]*informer.Change) { write(t, s, b) }, func(b [][]*informer.Change) {
		res, err := client.CreatePartitions(ctx, &kafkago.CreatePartitionsRequest{Topics: []kafkago.TopicPartitionsConfig{{Name: topic, Count: 6}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Errors[topic]; err != nil {
			t.Fatal(err)
		}
		// A sink started after the growth knows 6 partitions at once;
		// the running one would learn it within partitionsMaxAge and
		// then write exactly this.
		grown, _ := kafkaSink(t, addr, config.ContentModeBinary)
		write(t, grown, b)
	})
	// The added partitions hold records: the growth moved keys.
	offs, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{
		topic: {kafkago.LastOffsetOf(3), kafkago.LastOffsetOf(4), kafkago.LastOffsetOf(5)}}})
	if err != nil {
		t.Fatal(err)
	}
	moved := int64(0)
	for _, p := range offs.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("partition %d: %v", p.Partition, p.Error)
		}
		moved += p.LastOffset
	}
	if moved == 0 {
		t.Fatal("nothing was written to the added partitions")
	}
	t.Logf("%d records in the added partitions", moved)

	held := func(h *consumer.History) []string {
		out := []string{}
		for _, o := range h.View.Objects(resource) {
			out = append(out, o.Name+"@"+o.ResourceVersion+"#"+o.UID)
		}
		slices.Sort(out)
		return out
	}
	// Every few versions, and each around the growth, the delete and the
	// re-creation.
	for _, rv := range slices.Sorted(maps.Keys(states)) {
		if rv < 12 || rv%every != 0 && !slices.Contains(notable, rv) && !slices.Contains(notable, rv-1) {
			continue
		}
		cfg := consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, RV: uint64(rv)}
		early, err := consumer.HistoryAt(ctx, cfg)
		if err != nil {
			t.Fatalf("at %d: %v", rv, err)
		}
		want := states[rv]
		if got := held(early); !slices.Equal(got, want) {
			t.Errorf("at %d (from %s, %d records read): %v\nwant %v", rv, early.Snapshot, early.Read, got, want)
		}
		if !slices.Contains(notable, rv) {
			continue
		}
		cfg.WatchPerNamespace = true
		whole, err := consumer.HistoryAt(ctx, cfg)
		if err != nil {
			t.Fatalf("at %d, reading to the end: %v", rv, err)
		}
		if got := held(whole); !slices.Equal(got, want) {
			t.Errorf("at %d, reading to the end (from %s): %v\nwant %v", rv, whole.Snapshot, got, want)
		}
	}

	vs, err := consumer.Versions(ctx, consumer.VersionsConfig{Brokers: []string{addr}, Topic: topic, Key: resource + "/team-a/w3"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs.Versions {
		got = append(got, fmt.Sprintf("%s@%d#%s", v.Type, v.RV, uidOf(t, v)))
	}
	if !slices.Equal(got, w3) {
		t.Errorf("versions of w3: %v\nwant %v", got, w3)
	}
}

func uidOf(t *testing.T, v consumer.Version) string {
	t.Helper()
	var o struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(v.Event.Data(), &o); err != nil {
		t.Fatalf("version %d: %v", v.RV, err)
	}
	return o.Metadata.UID
}

// Right after a growth, before the next snapshot has started, an added
// partition holds nothing that places it after the last snapshot: history
// cannot tell it from a partition whose end it looked up just before that
// snapshot's marker reached it, and says it has no snapshot rather than
// answer without the partition's part of the window.
func TestHistoryAtRefusesAPointAfterAGrowthUntilTheNextSnapshotStarts(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &kafkago.Client{Addr: kafkago.TCP(addr), Transport: &kafkago.Transport{}}
	_, _, _ = grownHistory(false, func(b [][]*informer.Change) { write(t, s, b) }, func(b [][]*informer.Change) {
		res, err := client.CreatePartitions(ctx, &kafkago.CreatePartitionsRequest{Topics: []kafkago.TopicPartitionsConfig{{Name: topic, Count: 6}}})
		if err != nil || res.Errors[topic] != nil {
			t.Fatalf("growing %s: %v %v", topic, err, res)
		}
		grown, _ := kafkaSink(t, addr, config.ContentModeBinary)
		write(t, grown, b[:1]) // the updates after the growth, no snapshot
	})
	_, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: resource, RV: 70})
	if !errors.Is(err, consumer.ErrNoSnapshot) {
		t.Fatalf("at 70, after the growth and before any snapshot there: %v, want ErrNoSnapshot", err)
	}
}
