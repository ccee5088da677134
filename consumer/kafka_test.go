package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func startKfake(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// kafkaSink returns kubewire's Kafka sink, connected, and the topic it
// writes the scenario's resource to.
func kafkaSink(t *testing.T, addr, mode string) (sinks.Sink, string) {
	t.Helper()
	prefix := "kw-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	on := true
	kc := &kafka.Config{
		Brokers: []string{addr}, Topic: prefix + ".{group}.{resource}", ContentMode: mode, Tombstones: &on,
		CreateTopics:   &kafka.CreateTopics{Partitions: 3, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second), DialTimeout: config.NewDuration(2 * time.Second),
	}
	s, err := kafka.New("kafka", kc, sinks.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	connectSink(t, s)
	return s, kafka.TopicName(kc.Topic, "", sinktest.Resource.GVR.Group, "", sinktest.Resource.GVR.Resource)
}

func kafkaView(t *testing.T, cfg consumer.KafkaConfig) *consumer.View {
	t.Helper()
	v, _ := stoppableKafkaView(t, cfg)
	return v
}

func stoppableKafkaView(t *testing.T, cfg consumer.KafkaConfig) (*consumer.View, func()) {
	t.Helper()
	v := consumer.NewView(consumer.Options{})
	src, err := consumer.NewKafkaSource(v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v, runSource(t, src.Run)
}

func TestWhatKubewiresKafkaSinkWroteIsReadBackIntoAViewAndAnInformer(t *testing.T) {
	addr := startKfake(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			s, topic := kafkaSink(t, addr, mode)
			write(t, s, scenario("snap-1"))
			v := kafkaView(t, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic})
			checkViewAndInformer(t, v, scenarioHolds)
			if st := v.Stats(); st.Tombstones != 1 || st.Pruned != 1 {
				t.Errorf("stats %+v: want the tombstone and the pruned key counted", st)
			}
		})
	}
}

func TestAKafkaSourceResumesFromAStoredPositionAndFromItsGroupsCommittedOffsets(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	write(t, s, scenario("snap-1"))
	base := consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic}

	first := kafkaView(t, base)
	grouped := base
	grouped.GroupID = "audit"
	firstGroup, stopGroup := stoppableKafkaView(t, grouped)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []*consumer.View{first, firstGroup} {
		if err := v.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stored := first.Position()
	// The group's member leaves before more is written, so that only the
	// next member reads it, from the offsets this one committed.
	stopGroup()

	write(t, s, [][]*informer.Change{{sinktest.Change(informer.OpAdded, "team-a", "later", 9)}})
	for _, tc := range []struct {
		name string
		cfg  consumer.KafkaConfig
	}{
		{"from the stored position", consumer.KafkaConfig{Brokers: base.Brokers, Topic: topic, Start: stored}},
		{"from the group's committed offsets", grouped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := kafkaView(t, tc.cfg)
			checkViewAndInformer(t, v, []string{"later@9#uid-team-a-later"})
		})
	}
}

func TestAStoredPositionPastTheTopicIsAGapAndTheSourceReadsOnFromTheFirstOffset(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	write(t, s, scenario("snap-1"))
	start := consumer.Positions{}
	for p := range 3 {
		start[consumer.KafkaPartition(topic, p)] = 1000
	}
	v := kafkaView(t, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic, Start: start})
	checkViewAndInformer(t, v, scenarioHolds)
	if st := v.Stats(); st.Gaps != 3 {
		t.Errorf("%d gaps recorded, want one per partition", st.Gaps)
	}
}

// A member of a consumer group that waited for the group coordinator's
// answer to one commit per record could read only as fast as those round
// trips (about 100 records/s against a real cluster, slower than kubewire
// writes): it must commit what its View applied a batch at a time.
func TestAGroupMemberCommitsWhatItsViewAppliedInBatchesNotOneCommitPerRecord(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var commits atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		commits.Add(1)
		return nil, nil, false // counted, then handled by kfake as usual
	})
	addr := c.ListenAddrs()[0]
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	const n = 600
	changes := make([]*informer.Change, n)
	for i := range changes {
		changes[i] = sinktest.Change(informer.OpAdded, "team-a", fmt.Sprintf("cm-%d", i), i+1)
	}
	write(t, s, [][]*informer.Change{changes})

	v := kafkaView(t, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic, GroupID: "batches"})
	held := func() int {
		objs, _ := v.List()
		return len(objs)
	}
	cl := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 5 * time.Second}
	var committed int64
	testkit.Within(t, 30*time.Second, "the group to commit every record", func() bool {
		res, err := cl.OffsetFetch(context.Background(), &kafkago.OffsetFetchRequest{GroupID: "batches", Topics: map[string][]int{topic: {0, 1, 2}}})
		if err != nil || res.Error != nil {
			return false
		}
		committed = 0
		for _, p := range res.Topics[topic] {
			committed += max(0, p.CommittedOffset)
		}
		return committed == n
	}, func() string { return fmt.Sprintf("%d of %d committed, %d applied", committed, n, held()) })
	t.Logf("%d OffsetCommit requests for %d records", commits.Load(), n)
	if got := commits.Load(); got > n/10 {
		t.Errorf("%d OffsetCommit requests for %d records: want a commit per batch, at most %d", got, n, n/10)
	}
	if got := held(); got != n {
		t.Errorf("the View holds %d objects, want %d", got, n)
	}
}
