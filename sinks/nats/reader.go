package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
)

// DecodeMessage reads the CloudEvent of a message written by this sink (or
// any producer that follows the CloudEvents NATS binding): structured when
// Content-Type says so, else binary with percent-encoded ce- headers.
func DecodeMessage(h natsgo.Header, data []byte) (*event.Event, error) {
	var hs []encoding.Header
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		v := vs[0]
		if strings.HasPrefix(strings.ToLower(k), "ce-") {
			var err error
			if v, err = encoding.DecodeHeaderValue(v); err != nil {
				return nil, fmt.Errorf("nats: header %s: %w", k, err)
			}
		}
		hs = append(hs, encoding.Header{Key: k, Value: v})
	}
	return encoding.Decode(hs, "ce-", data)
}

// ReadStream reads the sink's JetStream stream from its first message to the
// last one it held when reading began, and calls fn for each event in
// stream order. The stream is the one the config provisions, or else the one
// that captures the sink's subjects.
func ReadStream(ctx context.Context, c *Config, fn func(*event.Event) error) error {
	nc, js, name, err := OpenStream(ctx, c)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("nats: stream %s: %w", name, err)
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("nats: consumer on %s: %w", name, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("nats: fetch from %s: %w", name, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("nats: metadata: %w", err)
			}
			ev, err := DecodeMessage(m.Headers(), m.Data())
			if err != nil {
				return fmt.Errorf("nats: %s seq %d: %w", name, meta.Sequence.Stream, err)
			}
			if err := fn(ev); err != nil {
				return err
			}
			if meta.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsgo.ErrTimeout) {
			return fmt.Errorf("nats: fetch from %s: %w", name, err)
		}
		if n == 0 {
			return fmt.Errorf("nats: stream %s ended before sequence %d", name, last)
		}
	}
}

var _ sinks.Reader = (*Config)(nil)

// ReadBack implements sinks.Reader: a JetStream stream is one ordered
// partition. A core NATS sink fails with ErrNoHistory.
func (c *Config) ReadBack(ctx context.Context, _ []config.Route, fn func(sinks.Record) error) error {
	return ReadStream(ctx, c, func(ev *event.Event) error {
		key, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
		return fn(sinks.Record{Key: key, Event: ev})
	})
}
