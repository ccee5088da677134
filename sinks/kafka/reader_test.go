package kafka_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkasarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// rawRecord is one record as it sits in a partition.
type rawRecord struct {
	topic     string
	partition int
	offset    int64
	key       []byte
	value     []byte // nil for a tombstone
	headers   map[string][]byte
}

// readTopic returns every record of topic, partition by partition, from the
// start. It reads with kafka-go's plain Fetch, not through the sink.
func readTopic(ctx context.Context, t testing.TB, addr, topic string) []rawRecord {
	t.Helper()
	// A transport of its own: kafka-go's default one caches metadata for
	// seconds and would not see a topic created a moment ago.
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 10 * time.Second, Transport: tr}
	md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) == 0 || md.Topics[0].Error != nil {
		return nil // not there yet, or the broker is restarting
	}
	var out []rawRecord
	for _, p := range md.Topics[0].Partitions {
		var offset int64
		for {
			res, err := c.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: p.ID, Offset: offset,
				MaxBytes: 16 << 20, MaxWait: 10 * time.Millisecond})
			if err != nil || res.Error != nil {
				return nil
			}
			n := 0
			for {
				r, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil
				}
				rr := rawRecord{topic: topic, partition: p.ID, offset: r.Offset, headers: map[string][]byte{}}
				if r.Key != nil {
					rr.key, _ = kafkago.ReadAll(r.Key)
				}
				if r.Value != nil {
					rr.value, _ = kafkago.ReadAll(r.Value)
					if rr.value == nil {
						rr.value = []byte{}
					}
				}
				for _, h := range r.Headers {
					rr.headers[h.Key] = h.Value
				}
				if r.Offset >= offset {
					out = append(out, rr)
					offset = r.Offset + 1
					n++
				}
			}
			if offset >= res.HighWatermark || n == 0 {
				break
			}
		}
	}
	return out
}

// decodeRecords turns records into CloudEvents with sdk-go's own Kafka
// reader, skipping tombstones, which are not events.
func decodeRecords(t testing.TB, rs []rawRecord) []*event.Event {
	t.Helper()
	var out []*event.Event
	for _, r := range rs {
		if r.value == nil {
			continue
		}
		ct := string(r.headers["content-type"])
		ev, err := binding.ToEvent(context.Background(), kafkasarama.NewMessage(r.value, ct, r.headers))
		if err != nil {
			t.Errorf("record %s[%d]@%d is not a CloudEvent sdk-go can read: %v", r.topic, r.partition, r.offset, err)
			continue
		}
		out = append(out, ev)
	}
	return out
}

var topicSeq atomic.Int64

// uniquePrefix keeps every test's topics apart on a shared broker.
func uniquePrefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return "t" + itoa(topicSeq.Add(1)) + "-" + strings.Trim(name, "-")
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// newSink builds a sink whose topics are <prefix>.<group>.<resource>,
// created with partitions partitions on first use. edit may change the
// config.
func newSink(t testing.TB, addr string, partitions int, edit func(*kafka.Config)) (sinks.Sink, string) {
	t.Helper()
	prefix := uniquePrefix(t)
	kc := &kafka.Config{
		Brokers:        []string{addr},
		Topic:          prefix + ".{group}.{resource}",
		CreateTopics:   &kafka.CreateTopics{Partitions: partitions, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second),
		DialTimeout:    config.NewDuration(2 * time.Second),
	}
	if edit != nil {
		edit(kc)
	}
	s, err := kafka.New("kafka-test", kc, sinks.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return s, prefix
}

// suiteTopics are the topics the conformance suite's two resources map to.
func suiteTopics(prefix string) []string {
	return []string{
		kafka.TopicName(prefix+".{group}.{resource}", "", sinktest.Resource.GVR.Group, "", sinktest.Resource.GVR.Resource),
		kafka.TopicName(prefix+".{group}.{resource}", "", "", "", sinktest.ClusterResource.GVR.Resource),
	}
}

// suiteHarness builds the conformance suite's Harness for a broker at addr.
type suiteHarness struct {
	addr       func() string
	partitions int
	restart    func(t *testing.T)
	// Edit, if set, changes each sink's config.
	Edit func(*kafka.Config)
}

func harness(addr func() string, partitions int, restart func(t *testing.T)) *suiteHarness {
	return &suiteHarness{addr: addr, partitions: partitions, restart: restart}
}

func (h *suiteHarness) Harness() sinktest.Harness {
	return sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			s, prefix := newSink(t, h.addr(), h.partitions, h.Edit)
			return s, func(ctx context.Context, t *testing.T) []*event.Event {
				var all []rawRecord
				for _, topic := range suiteTopics(prefix) {
					all = append(all, readTopic(ctx, t, h.addr(), topic)...)
				}
				return decodeRecords(t, all)
			}
		},
		Restart: h.restart,
		// The widgets' topic exists and the nodes' does not (the sink may
		// not create topics): the nodes' events fail until heal creates
		// their topic.
		Partial: func(t *testing.T) (sinks.Sink, sinktest.Reader, func(*testing.T)) {
			s, prefix := newSink(t, h.addr(), h.partitions, func(k *kafka.Config) {
				if h.Edit != nil {
					h.Edit(k)
				}
				k.CreateTopics = nil
			})
			topics := suiteTopics(prefix)
			newTopic(t, h.addr(), topics[0], h.partitions)
			read := func(ctx context.Context, t *testing.T) []*event.Event {
				var all []rawRecord
				for _, topic := range topics {
					all = append(all, readTopic(ctx, t, h.addr(), topic)...)
				}
				return decodeRecords(t, all)
			}
			return s, read, func(t *testing.T) { newTopic(t, h.addr(), topics[1], h.partitions) }
		},
	}
}

// newTopic creates topic with n partitions and the given configs, as an
// operator would.
func newTopic(t *testing.T, addr, topic string, n int, configs ...kafkago.ConfigEntry) {
	t.Helper()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 10 * time.Second}
	res, err := c.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
		Topic: topic, NumPartitions: n, ReplicationFactor: 1, ConfigEntries: configs,
	}}})
	if err != nil || res.Errors[topic] != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, res.Errors)
	}
}
