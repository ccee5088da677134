package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"strconv"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
)

// Record is one record read back from a topic: an event, or a tombstone
// (Event nil) for Key.
type Record struct {
	Partition int
	Offset    int64
	Key       string
	Event     *event.Event
}

// DecodeMessage reads the CloudEvent of a record written by this sink (or any
// producer that follows the CloudEvents Kafka binding). A record with no
// value is a tombstone and yields nil.
func DecodeMessage(m kafkago.Message) (*event.Event, error) {
	if m.Value == nil {
		return nil, nil
	}
	hs := make([]encoding.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = encoding.Header{Key: h.Key, Value: string(h.Value)}
	}
	return encoding.Decode(hs, "ce_", m.Value)
}

// Dialer returns a kafka-go dialer with the sink's dial timeout, client id,
// TLS and SASL settings, for reading back what the sink wrote.
func Dialer(k *Config) (*kafkago.Dialer, error) {
	c := k.Defaulted()
	d := &kafkago.Dialer{Timeout: c.DialTimeout.Duration, ClientID: c.ClientID}
	if c.TLS != nil {
		tc, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, err
		}
		d.TLS = tc
	}
	if c.SASL != nil {
		m, err := saslMechanism(c.SASL)
		if err != nil {
			return nil, err
		}
		d.SASLMechanism = m
	}
	return d, nil
}

// ReadTopic reads every partition of topic from its first offset up to the
// end offset it had when reading began, with the sink's TLS and SASL
// settings, and calls fn for each record in partition order.
func ReadTopic(ctx context.Context, k *Config, topic string, fn func(Record) error) error {
	d, err := Dialer(k)
	if err != nil {
		return err
	}
	c := k.Defaulted()
	var parts []kafkago.Partition
	for _, b := range c.Brokers {
		if parts, err = d.LookupPartitions(ctx, "tcp", b, topic); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("kafka: partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		if err := readPartition(ctx, d, c.Brokers[0], topic, p.ID, fn); err != nil {
			return err
		}
	}
	return nil
}

func readPartition(ctx context.Context, d *kafkago.Dialer, broker, topic string, partition int, fn func(Record) error) error {
	conn, err := d.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return fmt.Errorf("kafka: leader of %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return fmt.Errorf("kafka: offsets of %s/%d: %w", topic, partition, err)
	}
	if _, err := conn.Seek(first, kafkago.SeekAbsolute); err != nil {
		return fmt.Errorf("kafka: seek %s/%d to %d: %w", topic, partition, first, err)
	}
	for next := first; next < last; {
		if err := ctx.Err(); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		batch := conn.ReadBatch(1, 16<<20)
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			next = m.Offset + 1
			ev, err := DecodeMessage(m)
			if err != nil {
				return fmt.Errorf("kafka: %s/%d@%d: %w", topic, partition, m.Offset, err)
			}
			if err := fn(Record{Partition: partition, Offset: m.Offset, Key: string(m.Key), Event: ev}); err != nil {
				return err
			}
		}
		if err := batch.Close(); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("kafka: read %s/%d at %d: %w", topic, partition, next, err)
		}
	}
	return nil
}

var _ sinks.Reader = (*Config)(nil)

// ReadBack implements sinks.Reader: it reads every topic the routed
// resources' events go to, each partition from its first offset.
func (k *Config) ReadBack(ctx context.Context, routes []config.Route, fn func(sinks.Record) error) error {
	c := k.Defaulted()
	seen := map[string]bool{}
	for _, rt := range routes {
		r := rt.Resource
		topic := TopicName(c.Topic, rt.Cluster, r.Group, r.Version, r.Resource)
		if seen[topic] {
			continue
		}
		seen[topic] = true
		err := ReadTopic(ctx, &c, topic, func(rec Record) error {
			return fn(sinks.Record{Partition: topic + "/" + strconv.Itoa(rec.Partition), Key: rec.Key, Event: rec.Event})
		})
		if err != nil {
			return err
		}
	}
	return nil
}
