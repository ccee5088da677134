package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	kafkago "github.com/segmentio/kafka-go"
)

func TestDirStatesLoadsTheNewestStateEvenWhenAnOlderOneIsSavedAfterIt(t *testing.T) {
	ctx := context.Background()
	store := consumer.DirStates(t.TempDir())
	if b, err := store.Load(ctx, "t/0"); err != nil || b != nil {
		t.Fatalf("nothing saved yet: got %q, %v; want nil, nil", b, err)
	}
	// A member the group already gave up on can save late, and an older
	// position than the member that reads the partition now.
	for _, s := range []struct {
		pos   int64
		state string
	}{{10, "ten"}, {120, "one-twenty"}, {90, "ninety, late"}} {
		if err := store.Save(ctx, "t/0", s.pos, []byte(s.state)); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Save(ctx, "t/1", 5, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if b, err := store.Load(ctx, "t/0"); err != nil || string(b) != "one-twenty" {
		t.Fatalf("got %q, %v; want the state of position 120", b, err)
	}
	if b, err := store.Load(ctx, "t/1"); err != nil || string(b) != "other" {
		t.Fatalf("got %q, %v; want t/1's own state", b, err)
	}
}

// A member that joins a group whose partitions' states were saved takes
// them over: its View holds what the first member's did without reading a
// record again, its handlers get the objects as listed adds, and it starts
// each partition where the state stands.
func TestAGroupMemberWithStatesTakesOverTheSavedStatesOfItsPartitions(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	batches, live, _ := killHistory(rand.New(rand.NewPCG(killSeed, 5)), 600)
	write(t, s, batches)
	end := topicEnds(t, addr, topic, 3)
	store := consumer.DirStates(t.TempDir())
	cfg := consumer.KafkaConfig{
		Brokers: []string{addr}, Topic: topic, GroupID: "states", States: store,
		CommitInterval: 50 * time.Millisecond, MaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	first, stop := stoppableKafkaView(t, cfg)
	if err := first.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(viewHolds(t, first), " "); got != strings.Join(withUIDs(live), " ") {
		t.Fatalf("the first member holds %d: %s, want %d: %s", len(viewHolds(t, first)), got, len(live), withUIDs(live))
	}
	stop() // leaves the group: saves and commits each partition
	firstSeq := stateSeq(t, first)

	var read, listed, other atomic.Int64
	assigned := make(chan consumer.Rebalance, 4)
	second := consumer.NewView(consumer.Options{OnRead: func(consumer.Read) { read.Add(1) }})
	second.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if initial {
				listed.Add(1)
			} else {
				other.Add(1)
			}
		},
		UpdateFunc: func(_, _ any) { other.Add(1) },
		DeleteFunc: func(any) { other.Add(1) },
	})
	cfg.OnRebalance = func(rb consumer.Rebalance) { assigned <- rb }
	src, err := consumer.NewKafkaSource(second, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopSecond := runSource(t, src.Run)
	if err := second.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case rb := <-assigned:
		for p, o := range end {
			if rb.Assigned[p] != o {
				t.Errorf("the second member starts %s at %d, want %d (where the saved state stands)", p, rb.Assigned[p], o)
			}
		}
	case <-ctx.Done():
		t.Fatal("no generation reported")
	}
	if got := strings.Join(viewHolds(t, second), " "); got != strings.Join(withUIDs(live), " ") {
		t.Errorf("the second member holds %s, want %s", got, withUIDs(live))
	}
	if n := read.Load(); n != 0 {
		t.Errorf("the second member read %d records again; the states hold them", n)
	}
	// The View numbers its events for the rule (which keys a snapshot
	// prunes). A partition's state carries its own newest number, not its
	// saver's whole count: taking over three partitions from one member
	// must not triple it, or hand-offs would compound until it wrapped.
	if got := stateSeq(t, second); got > firstSeq {
		t.Errorf("the second member's sequence stands at %d after taking over the first's partitions, past the first's %d", got, firstSeq)
	}
	if listed.Load() != int64(len(live)) || other.Load() != 0 {
		t.Errorf("handlers got %d listed adds and %d other calls; want %d and 0", listed.Load(), other.Load(), len(live))
	}

	stopSecond()

	// A saved state past the partition's end belongs to a topic deleted
	// and created again: it is reported, and not taken over.
	p0 := consumer.KafkaPartition(topic, 0)
	b, err := store.Load(ctx, p0)
	if err != nil || b == nil {
		t.Fatalf("the state of %s: %q, %v", p0, b, err)
	}
	past := end[p0] + 1000
	b = bytes.Replace(b, []byte(fmt.Sprintf("%q:%d", p0, end[p0])), []byte(fmt.Sprintf("%q:%d", p0, past)), 1)
	if err := store.Save(ctx, p0, past, b); err != nil {
		t.Fatal(err)
	}
	var reported atomic.Value
	third := consumer.NewView(consumer.Options{})
	cfg.OnRebalance = nil
	cfg.OnError = func(err error, _ time.Duration) {
		if strings.Contains(err.Error(), "past the partition's end") {
			reported.Store(err.Error())
		}
	}
	src, err = consumer.NewKafkaSource(third, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src.Run)
	if err := third.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if reported.Load() == nil {
		t.Errorf("a saved state of %s past its end (%d > %d) was not reported", p0, past, end[p0])
	}
	if g := third.Stats().Gaps; g != 0 {
		t.Errorf("the third member recorded %d gaps: it took over the state past the end and then read the partition again", g)
	}
	if got := third.Position()[p0]; got != end[p0] {
		t.Errorf("the third member stands at %d in %s, want the group's offset %d: it took over a state past the end", got, p0, end[p0])
	}
}

// topicEnds returns each partition's end offset.
func topicEnds(t *testing.T, addr, topic string, partitions int) consumer.Positions {
	t.Helper()
	end := consumer.Positions{}
	for p := 0; p < partitions; p++ {
		testkit.Eventually(t, fmt.Sprintf("the end offset of %s/%d", topic, p), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := kafkago.DialLeader(ctx, "tcp", addr, topic, p)
			if err != nil {
				t.Logf("leader of %s/%d: %v", topic, p, err)
				return false
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			last, err := conn.ReadLastOffset()
			if err != nil {
				t.Logf("end offset of %s/%d: %v", topic, p, err)
			}
			end[consumer.KafkaPartition(topic, p)] = last
			return err == nil
		})
	}
	return end
}

// stateSeq returns the sequence number in the header of v's saved state.
func stateSeq(t *testing.T, v *consumer.View) uint64 {
	t.Helper()
	var b bytes.Buffer
	if err := v.SaveState(&b); err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(b.Bytes(), []byte("\n"))
	var h struct{ Seq uint64 }
	if err := json.Unmarshal(line, &h); err != nil {
		t.Fatal(err)
	}
	return h.Seq
}
