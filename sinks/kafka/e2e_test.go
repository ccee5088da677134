//go:build e2e

package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// One real broker serves every end-to-end test of the package except the
// ones that need their own broker settings.
func TestE2EConformanceOnRealKafkaWithSIGKILLRestart(t *testing.T) {
	b := kafkatest.Start(t, nil)
	addr := func() string { return b.Addr }
	sinktest.Run(t, harness(addr, 3, b.Restart).Harness())
}

func createTopic(t *testing.T, addr, name string, partitions int, configs map[string]string) {
	t.Helper()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 20 * time.Second, Transport: tr}
	tc := kafkago.TopicConfig{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafkago.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	res, err := c.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{tc}})
	if err != nil || res.Errors[name] != nil {
		t.Fatalf("create topic %s: %v %v", name, err, res.Errors)
	}
}

func TestE2EAnOversizedEventFallsBackToAReferenceOnRealKafka(t *testing.T) {
	b := kafkatest.Start(t, nil)
	s, prefix := newSink(t, b.Addr, 1, nil)
	createTopic(t, b.Addr, widgetTopic(prefix), 1, map[string]string{"max.message.bytes": "4000"})
	connect(t, s)

	bigObject := sinktest.Object("team-a", "big", 2)
	bigObject.Object["spec"] = map[string]any{"blob": strings.Repeat("x", 10000)}
	big := sinktest.ChangeOf(informer.OpUpdated, bigObject)
	before := testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference"))
	write(t, s,
		sinktest.Change(informer.OpUpdated, "team-a", "small-1", 1),
		big,
		sinktest.Change(informer.OpUpdated, "team-a", "small-2", 3),
	)
	var names []string
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, b.Addr, widgetTopic(prefix))) {
		n, _ := ev.Extensions()[encoding.ExtName].(string)
		if p, _ := ev.Extensions()[encoding.ExtPayload].(string); p != "" {
			n += "(" + p + ")"
		}
		names = append(names, n)
	}
	if got, want := strings.Join(names, ","), "small-1,big(reference),small-2"; got != want {
		t.Errorf("the topic holds %s, want %s", got, want)
	}
	if d := testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference")) - before; d != 1 {
		t.Errorf("kubewire_kafka_oversized_events_total{action=reference} grew by %v, want 1", d)
	}
}

// After the log cleaner has run, a compacted topic fed with tombstones holds
// each live object once and no deleted object at all.
func TestE2EACompactedTopicWithTombstonesHoldsExactlyTheLiveObjects(t *testing.T) {
	b := kafkatest.Start(t, map[string]string{"log.cleaner.backoff.ms": "200"})
	s, prefix := newSink(t, b.Addr, 1, nil)
	createTopic(t, b.Addr, widgetTopic(prefix), 1, map[string]string{
		"cleanup.policy":            "compact",
		"segment.ms":                "100",
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       "0",
		"min.compaction.lag.ms":     "0",
	})
	connect(t, s)

	live := map[string]int{}
	var changes []*informer.Change
	for i := range 10 {
		name := "obj-" + strconv.Itoa(i)
		for rv := 1; rv <= 3; rv++ {
			op := informer.OpUpdated
			if rv == 1 {
				op = informer.OpAdded
			}
			changes = append(changes, sinktest.Change(op, "team-a", name, i*10+rv))
		}
		if i%2 == 0 {
			changes = append(changes, sinktest.Change(informer.OpDeleted, "team-a", name, i*10+4))
		} else {
			live["widgets.demo.kubewire.io/team-a/"+name] = i*10 + 3
		}
	}
	// Kafka rolls segments by record timestamps, which are the events'
	// times: the suite's fixed time would never roll one.
	for _, c := range changes {
		c.Observed = time.Now()
	}
	write(t, s, changes...)

	// Compaction skips the active segment; each poll writes one more change
	// of a live "roll" object so the segment before it rolls and is cleaned.
	roll := 0
	rollKey := "widgets.demo.kubewire.io/team-a/roll"
	var why string
	testkit.Within(t, 90*time.Second, "the cleaner to compact the topic", func() bool {
		roll++
		rc := sinktest.Change(informer.OpUpdated, "team-a", "roll", 1000+roll)
		rc.Observed = time.Now()
		write(t, s, rc)
		seen := map[string]int{}
		var last = map[string]rawRecord{}
		for _, r := range readTopic(context.Background(), t, b.Addr, widgetTopic(prefix)) {
			if string(r.key) == rollKey {
				continue
			}
			seen[string(r.key)]++
			last[string(r.key)] = r
		}
		for k, n := range seen {
			if n > 1 {
				why = k + " appears " + strconv.Itoa(n) + " times"
				return false
			}
			if _, ok := live[k]; !ok {
				why = "deleted object " + k + " is still there"
				return false
			}
		}
		for k, rv := range live {
			r, ok := last[k]
			if !ok || string(r.headers["ce_resourceversion"]) != strconv.Itoa(rv) {
				why = "live object " + k + " lacks its latest state"
				return false
			}
		}
		return true
	}, func() string { return why })
}

// javaPartitioner prints the partition Java's producer picks for each key
// argument, with the class Kafka's producer itself uses.
const javaPartitioner = `
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import java.nio.charset.StandardCharsets;
public class Main {
  public static void main(String[] args) {
    int n = Integer.parseInt(args[0]);
    for (int i = 1; i < args.length; i++) {
      System.out.println(BuiltInPartitioner.partitionForKey(args[i].getBytes(StandardCharsets.UTF_8), n));
    }
  }
}
`

func TestE2EKubewireAndJavasProducerPickTheSamePartition(t *testing.T) {
	b := kafkatest.Start(t, nil)
	keys := []string{"pods/default/web-0", "configmaps/kube-system/coredns", "nodes/node-a.example",
		"widgets.demo.kubewire.io/team-a/cm-1", "deployments.apps/prod/api", "ünïcødé/ns/ö", ""}
	bal, _ := kafka.NewBalancer(kafka.BalancerMurmur2)
	for _, n := range []int{1, 3, 7, 12} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := b.Java(ctx, javaPartitioner, append([]string{strconv.Itoa(n)}, keys[:len(keys)-1]...)...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		for i, line := range strings.Fields(out) {
			want, _ := strconv.Atoi(line)
			if got := bal.Balance(kafkago.Message{Key: []byte(keys[i])}, ids...); got != want {
				t.Errorf("key %q over %d partitions: kubewire picks %d, Java %d", keys[i], n, got, want)
			}
		}
	}
}

// rawProduce sends a record batch stamped by the test, as a copy of one of
// kubewire's requests that reaches the broker late would arrive.
func rawProduce(t *testing.T, addr, topic string, value string, records int, id int64, epoch int16, seq int32) error {
	t.Helper()
	var recs []kafkago.Record
	for range records {
		recs = append(recs, kafkago.Record{Key: kafkago.NewBytes([]byte("k")), Value: kafkago.NewBytes([]byte(value))})
	}
	raw, err := kafka.EncodeIdempotent(recs, id, epoch, seq)
	if err != nil {
		t.Fatal(err)
	}
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 20 * time.Second, Transport: tr}
	res, err := c.RawProduce(context.Background(), &kafkago.RawProduceRequest{Topic: topic, Partition: 0,
		RequiredAcks: kafkago.RequireAll, RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(raw)}})
	if err != nil {
		t.Fatalf("RawProduce: %v", err)
	}
	return res.Error
}

// The real broker holds more under kubewire's producer than it
// acknowledged to kubewire (here the test appends a batch under kubewire's
// producer id, as a broker whose state diverged would hold one), so it
// refuses kubewire's next batch with OUT_OF_ORDER_SEQUENCE_NUMBER. kubewire
// counts that as a sequence error, moves to a new epoch, and its retry
// lands; a batch of the epoch it left is then refused with
// INVALID_PRODUCER_EPOCH.
func TestE2ERealKafkaRefusesAnUnexpectedSequenceAndKubewireMovesToAnEpochThatFencesTheOld(t *testing.T) {
	b := kafkatest.Start(t, nil)
	s, prefix := newSink(t, b.Addr, 1, nil)
	topic := widgetTopic(prefix)
	createTopic(t, b.Addr, topic, 1, nil)
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "small-1", 1))
	id, epoch, seq, ok := kafka.ProducerState(s, topic, 0)
	if !ok {
		t.Fatal("the partition has no idempotent producer after a Write")
	}
	if err := rawProduce(t, b.Addr, topic, "other", 2, id, epoch, seq); err != nil {
		t.Fatalf("the broker refused the batch the test appends under kubewire's producer: %v", err)
	}

	before := testutil.ToFloat64(kafka.SequenceErrors.WithLabelValues("kafka-test", "out_of_order_sequence_number"))
	evs := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "small-2", 2))}
	err := s.Write(context.Background(), evs)
	if !errors.Is(err, kafkago.OutOfOrderSequenceNumber) {
		t.Fatalf("a Write at a sequence the broker does not expect returned %v, want %v", err, kafkago.OutOfOrderSequenceNumber)
	}
	if d := testutil.ToFloat64(kafka.SequenceErrors.WithLabelValues("kafka-test", "out_of_order_sequence_number")) - before; d != 1 {
		t.Errorf("kubewire_kafka_producer_sequence_errors_total{error=out_of_order_sequence_number} grew by %v, want 1", d)
	}
	if _, e, sq, _ := kafka.ProducerState(s, topic, 0); e != epoch+1 || sq != 0 {
		t.Errorf("epoch %d sequence %d after the sequence error, want epoch %d at sequence 0", e, sq, epoch+1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, evs); err != nil {
		t.Fatalf("the retry under the new epoch failed: %v", err)
	}

	err = rawProduce(t, b.Addr, topic, "stale", 1, id, epoch, seq+2)
	switch {
	case err == nil:
		t.Error("the broker appended a batch of an epoch the producer had left")
	case !errors.Is(err, kafkago.InvalidProducerEpoch):
		t.Errorf("the broker refused the stale batch with %v, want %v", err, kafkago.InvalidProducerEpoch)
	}
	var got []string
	for _, r := range readTopic(context.Background(), t, b.Addr, topic) {
		if string(r.key) == "k" {
			got = append(got, string(r.value))
		} else {
			got = append(got, string(r.headers["ce_name"]))
		}
	}
	if g := strings.Join(got, ","); g != "small-1,other,other,small-2" {
		t.Errorf("the partition holds %s, want small-1,other,other,small-2", g)
	}
}
