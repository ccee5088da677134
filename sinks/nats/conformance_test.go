package nats_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

var seq atomic.Int64

// jetStreamHarness gives each case its own subject prefix and its own
// stream, which the sink provisions itself. The reader fetches the whole
// stream, in stream order, with an ordered consumer on a separate
// connection.
func jetStreamHarness(b *broker, contentMode string, restart bool) sinktest.Harness {
	h := sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			n := strconv.FormatInt(seq.Add(1), 10)
			cfg := b.sinkConfig(kwnats.ModeJetStream)
			cfg.ContentMode = contentMode
			cfg.Subject = "js" + n + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
			stream := "CONFORMANCE_" + n
			cfg.JetStream = &kwnats.JetStream{MaxPending: 64, Stream: &kwnats.Stream{Name: stream}}
			s := newSink(t, "js-"+n, cfg)
			nc := b.connect(t)
			return s, func(ctx context.Context, t *testing.T) []*event.Event { return readStream(ctx, t, nc, stream) }
		},
	}
	if restart {
		h.Restart = b.Restart
	}
	// The test makes the stream, and it captures the widgets' subjects
	// only: the nodes' publishes find no stream until heal widens it.
	h.Partial = func(t *testing.T) (sinks.Sink, sinktest.Reader, func(*testing.T)) {
		n := strconv.FormatInt(seq.Add(1), 10)
		cfg := b.sinkConfig(kwnats.ModeJetStream)
		cfg.ContentMode = contentMode
		cfg.Subject = "js" + n + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
		cfg.PublishTimeout = config.NewDuration(time.Second)
		cfg.JetStream = &kwnats.JetStream{MaxPending: 64}
		stream := "PARTIAL_" + n
		nc := b.connect(t)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sc := jetstream.StreamConfig{Name: stream, Subjects: []string{"js" + n + ".*.*.*.widgets.>"}}
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
		heal := func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sc.Subjects = []string{"js" + n + ".>"}
			if _, err := js.UpdateStream(ctx, sc); err != nil {
				t.Fatalf("widen stream %s: %v", stream, err)
			}
		}
		return newSink(t, "partial-"+n, cfg), func(ctx context.Context, t *testing.T) []*event.Event { return readStream(ctx, t, nc, stream) }, heal
	}
	return h
}

func readStream(ctx context.Context, t *testing.T, nc *natsgo.Conn, stream string) []*event.Event {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Logf("reading stream %s: %v", stream, err) // not there yet, or server restarting
		return nil
	}
	total := st.CachedInfo().State.Msgs
	if total == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Logf("ordered consumer on %s: %v", stream, err)
		return nil
	}
	var out []*event.Event
	for uint64(len(out)) < total && ctx.Err() == nil {
		batch, err := cons.Fetch(int(total)-len(out), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Logf("fetch from %s: %v", stream, err)
			return out
		}
		for m := range batch.Messages() {
			ev, err := decode(m.Headers(), m.Data())
			if err != nil {
				t.Errorf("message on %s is not a valid CloudEvent: %v", m.Subject(), err)
				continue
			}
			out = append(out, ev)
		}
		if batch.Error() != nil {
			t.Logf("fetch from %s: %v", stream, batch.Error())
			return out
		}
	}
	return out
}

// coreHarness subscribes to each case's subject prefix before the sink
// publishes; what the subscription received is what a core consumer saw.
func coreHarness(b *broker) sinktest.Harness {
	return sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			n := strconv.FormatInt(seq.Add(1), 10)
			cfg := b.sinkConfig(kwnats.ModeCore)
			cfg.Subject = "core" + n + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
			nc := b.connect(t)
			var mu sync.Mutex
			var got []*natsgo.Msg
			if _, err := nc.Subscribe("core"+n+".>", func(m *natsgo.Msg) {
				mu.Lock()
				got = append(got, m)
				mu.Unlock()
			}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			if err := nc.Flush(); err != nil { // the server knows the subscription from here on
				t.Fatalf("flush: %v", err)
			}
			return newSink(t, "core-"+n, cfg), func(_ context.Context, t *testing.T) []*event.Event {
				mu.Lock()
				msgs := append([]*natsgo.Msg(nil), got...)
				mu.Unlock()
				out := make([]*event.Event, 0, len(msgs))
				for _, m := range msgs {
					ev, err := decode(m.Header, m.Data)
					if err != nil {
						t.Errorf("message on %s is not a valid CloudEvent: %v", m.Subject, err)
						continue
					}
					out = append(out, ev)
				}
				return out
			}
		},
	}
}

func TestJetStreamBinaryModePassesTheConformanceSuiteIncludingARestart(t *testing.T) {
	sinktest.Run(t, jetStreamHarness(startBroker(t), config.ContentModeBinary, true))
}

func TestJetStreamStructuredModePassesTheConformanceSuite(t *testing.T) {
	sinktest.Run(t, jetStreamHarness(startBroker(t), config.ContentModeStructured, false))
}

// Core NATS has no restart case: it is at most once by design, so messages
// published while the server is away are lost, and the suite's at-least-once
// case does not apply.
func TestCoreModePassesTheConformanceSuiteWithoutARestart(t *testing.T) {
	sinktest.Run(t, coreHarness(startBroker(t)))
}
