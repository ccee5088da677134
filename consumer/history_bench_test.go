//go:build bench

package consumer_test

import (
	"context"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The day of history the benchmark reads: what kubewire writes for a
// resource of 200 objects that changes about 11 times a second, with a
// snapshot every 10 minutes, into a topic of 3 partitions.
const (
	benchRecords    = 1_000_000
	benchObjects    = 200
	benchPartitions = 3
	benchDay        = 24 * time.Hour
	benchInterval   = 10 * time.Minute
)

// writeDay fills topic with benchRecords records spread over the day that
// ends at end, stamped as kubewire stamps them (the record's time is the
// change's observation), and returns how many it wrote.
func writeDay(b *testing.B, addr, topic string, end time.Time) int {
	b.Helper()
	ctx := context.Background()
	conns := make([]*kafkago.Conn, benchPartitions)
	for p := range conns {
		c, err := kafkago.DialLeader(ctx, "tcp", addr, topic, p)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[p] = c
	}
	batches := make([][]kafkago.Message, benchPartitions)
	flush := func(p int) {
		if _, err := conns[p].WriteMessages(batches[p]...); err != nil {
			b.Fatal(err)
		}
		batches[p] = batches[p][:0]
	}
	n := 0
	put := func(p int, c *informer.Change) {
		ev, err := encoding.New(c)
		if err != nil {
			b.Fatal(err)
		}
		m := kafka.EncodeMessage(ev, false)
		m.Time = c.Observed
		batches[p] = append(batches[p], m)
		n++
		if len(batches[p]) == 500 {
			flush(p)
		}
	}
	partOf := func(key string) int {
		h := fnv.New32a()
		h.Write([]byte(key))
		return int(h.Sum32() % benchPartitions)
	}
	held := make([]int, benchObjects)
	rv := 0
	snapshots := int(benchDay / benchInterval)
	perSnapshot := benchObjects + 2*benchPartitions
	updates := benchRecords - snapshots*perSnapshot
	start := end.Add(-benchDay)
	step := benchDay / time.Duration(updates)
	marker := func(op informer.Op, id string, at time.Time) {
		c := &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: id, SnapshotRV: strconv.Itoa(rv), Count: benchObjects, Observed: at}
		for p := range benchPartitions {
			put(p, c)
		}
	}
	for u := range updates {
		at := start.Add(time.Duration(u) * step)
		if u%(updates/snapshots) == 0 {
			id := "s" + strconv.Itoa(u/(updates/snapshots))
			marker(informer.OpSnapshotStarted, id, at)
			for i := range benchObjects {
				c := sinktest.Change(informer.OpSynced, "team-a", "w"+strconv.Itoa(i), max(held[i], 1))
				c.SnapshotID, c.Observed = id, at
				put(partOf(c.Key), c)
			}
			marker(informer.OpSnapshotCompleted, id, at)
		}
		rv++
		i := u % benchObjects
		held[i] = rv
		c := sinktest.Change(informer.OpUpdated, "team-a", "w"+strconv.Itoa(i), rv)
		c.Observed = at
		put(partOf(c.Key), c)
	}
	for p := range benchPartitions {
		if len(batches[p]) > 0 {
			flush(p)
		}
	}
	return n
}

// The figure: the time to answer `history --at -1h` in a topic of
// a day's history, one million records. The lookback is the command's
// default for a 10-minute snapshotInterval (interval plus 10m margin).
func BenchmarkHistoryAtOneHourBackInAMillionRecords(b *testing.B) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(benchPartitions))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	addr := kc.ListenAddrs()[0]
	const topic = "history-bench"
	conn, err := kafkago.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	err = conn.CreateTopics(kafkago.TopicConfig{Topic: topic, NumPartitions: benchPartitions, ReplicationFactor: 1})
	conn.Close()
	if err != nil {
		b.Fatal(err)
	}
	end := time.Now().Truncate(time.Second)
	began := time.Now()
	n := writeDay(b, addr, topic, end)
	b.Logf("wrote %d records in %s", n, time.Since(began).Round(time.Millisecond))
	cfg := consumer.HistoryConfig{Brokers: []string{addr}, Topic: topic, Resource: sinktest.Resource.KeyPrefix,
		At: end.Add(-time.Hour), Lookback: 2 * benchInterval, Now: func() time.Time { return end }}
	b.ReportAllocs()
	b.ResetTimer()
	var read int64
	for b.Loop() {
		h, err := consumer.HistoryAt(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if h.View.Len() != benchObjects {
			b.Fatalf("the state holds %d objects, want %d", h.View.Len(), benchObjects)
		}
		read += h.Read
	}
	b.ReportMetric(float64(read)/float64(b.N), "records/op")
}
