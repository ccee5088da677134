package nats_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// maxPayload is the server's max_payload in these tests: a usual event
// fits, a large ConfigMap does not.
const maxPayload = 8 << 10

// startSmallBroker runs an embedded nats-server whose max_payload is
// maxPayload.
func startSmallBroker(t *testing.T) *broker {
	t.Helper()
	return newBroker(t, &embedded{opts: natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: maxPayload,
	}})
}

// bigConfigMap is a change of a ConfigMap-like object with size bytes of
// data.
func bigConfigMap(rv, size int) *informer.Change {
	u := sinktest.Object("team-a", "big", rv)
	u.Object["data"] = map[string]any{"blob": strings.Repeat("x", size)}
	return sinktest.ChangeOf(informer.OpUpdated, u)
}

// received is one message as a consumer got it.
type received struct {
	subject string
	header  natsgo.Header
	data    []byte
}

func TestAnEventTooLargeForTheServerArrivesAsAReferenceEventWithItsId(t *testing.T) {
	cases := []struct {
		name, sink, mode, contentMode string
		// streamMaxMsgSize, when set, is the stream's own max_msg_size,
		// smaller than the server's max_payload: the stream, not the
		// client, refuses the full event.
		streamMaxMsgSize int32
	}{
		{"core binary", "core-binary", kwnats.ModeCore, config.ContentModeBinary, 0},
		{"core structured", "core-structured", kwnats.ModeCore, config.ContentModeStructured, 0},
		{"jetstream binary", "js-binary", kwnats.ModeJetStream, config.ContentModeBinary, 0},
		{"jetstream structured", "js-structured", kwnats.ModeJetStream, config.ContentModeStructured, 0},
		{"jetstream binary under the stream's max_msg_size", "js-stream-binary", kwnats.ModeJetStream, config.ContentModeBinary, 4 << 10},
		{"jetstream structured under the stream's max_msg_size", "js-stream-structured", kwnats.ModeJetStream, config.ContentModeStructured, 4 << 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startSmallBroker(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nc := b.connect(t)
			cfg := b.sinkConfig(tc.mode)
			cfg.ContentMode = tc.contentMode
			cfg.Subject = "refs.{namespace}.{name}"
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mode == kwnats.ModeJetStream {
				// The test makes the stream, so that it can set max_msg_size.
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REFS", Subjects: []string{"refs.>"},
					Storage: jetstream.MemoryStorage, MaxMsgSize: tc.streamMaxMsgSize}); err != nil {
					t.Fatal(err)
				}
				cfg.JetStream = &kwnats.JetStream{MaxPending: 16}
			}
			name := "oversize-" + tc.sink
			s := newSink(t, name, cfg)
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)

			// Core NATS keeps nothing: subscribe before the sink publishes.
			var mu sync.Mutex
			var got []received
			sub, err := nc.Subscribe("refs.>", func(m *natsgo.Msg) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, received{m.Subject, m.Header, m.Data})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}

			// Larger than max_payload, or, under a stream's max_msg_size,
			// within max_payload (so that the client sends it) but over
			// the stream's limit.
			size := 4 * maxPayload
			if tc.streamMaxMsgSize > 0 {
				size = 5 << 10
			}
			big := bigConfigMap(2, size)
			changes := []*informer.Change{
				sinktest.Change(informer.OpUpdated, "team-a", "small-1", 1),
				big,
				sinktest.Change(informer.OpUpdated, "team-a", "big", 3), // the same object, small again
				sinktest.Change(informer.OpUpdated, "team-a", "small-2", 4),
			}
			evs := make([]*encoding.Event, len(changes))
			for i, c := range changes {
				if evs[i], err = encoding.New(c); err != nil {
					t.Fatal(err)
				}
			}
			before := testutil.ToFloat64(kwnats.Oversized.WithLabelValues(name, "reference"))
			if err := s.Write(ctx, evs); err != nil {
				t.Fatalf("Write: %v", err)
			}

			var last error
			testkit.Within(t, 20*time.Second, "the subscriber to receive every event", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) >= len(evs)
			}, func() string { return fmt.Sprintf("last error: %v", last) })
			mu.Lock()
			msgs := append([]received(nil), got...)
			mu.Unlock()
			if tc.mode == kwnats.ModeJetStream {
				msgs = streamMessages(ctx, t, js, "REFS")
			}

			// Order holds per object (JetStream has many objects in
			// flight at once, so only per object).
			order := map[string][]string{}
			for _, m := range msgs {
				ev, err := decode(m.header, m.data)
				if err != nil {
					t.Fatalf("message on %s is not a CloudEvent: %v", m.subject, err)
				}
				n := extString(ev, encoding.ExtResourceVersion)
				if p := extString(ev, encoding.ExtPayload); p != "" {
					n += "(" + p + ")"
				}
				name := extString(ev, encoding.ExtName)
				order[name] = append(order[name], n)
				if ev.ID() != evs[1].ID() {
					continue
				}
				// The reference stands for the full event: same id (and
				// Nats-Msg-Id), type and extensions; data names the object.
				if p := extString(ev, encoding.ExtPayload); p != encoding.PayloadReference {
					t.Errorf("the large event arrived with payload %q, want %q", p, encoding.PayloadReference)
				}
				if tc.mode == kwnats.ModeJetStream && m.header.Get(jetstream.MsgIDHeader) != evs[1].ID() {
					t.Errorf("Nats-Msg-Id = %q, want the full event's id %q", m.header.Get(jetstream.MsgIDHeader), evs[1].ID())
				}
				if ev.Type() != evs[1].Type() || ev.Subject() != evs[1].Subject() || ev.DataContentType() != "application/json" {
					t.Errorf("reference event type %s subject %s datacontenttype %s; want the full event's",
						ev.Type(), ev.Subject(), ev.DataContentType())
				}
				data := sinktest.ReferenceData(t, tc.contentMode == config.ContentModeStructured, m.data)
				want := map[string]any{"apiVersion": "demo.kubewire.io/v1", "kind": "Widget", "namespace": "team-a",
					"name": "big", "uid": "uid-team-a-big", "resourceVersion": "2"}
				for k, v := range want {
					if data[k] != v {
						t.Errorf("reference data %s = %v, want %v", k, data[k], v)
					}
				}
			}
			if want := map[string][]string{"small-1": {"1"}, "big": {"2(reference)", "3"}, "small-2": {"4"}}; !reflect.DeepEqual(order, want) {
				t.Errorf("consumers received, by object, %v; want %v", order, want)
			}
			if d := testutil.ToFloat64(kwnats.Oversized.WithLabelValues(name, "reference")) - before; d != 1 {
				t.Errorf("kubewire_nats_oversized_events_total{action=reference} grew by %v, want 1", d)
			}
		})
	}
}

func extString(ev interface{ Extensions() map[string]any }, name string) string {
	s, _ := ev.Extensions()[name].(string)
	return s
}

// streamMessages returns every message of a stream, in stream order, as
// stored.
func streamMessages(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) []received {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []received
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d of %s: %v", seq, stream, err)
		}
		out = append(out, received{m.Subject, m.Header, m.Data})
	}
	return out
}

func TestAnEventWhoseReferenceIsTooLargeTooFailsPermanentlyAndIsCountedAsDropped(t *testing.T) {
	for _, mode := range []string{kwnats.ModeCore, kwnats.ModeJetStream} {
		t.Run(mode, func(t *testing.T) {
			// A stream whose max_msg_size no event fits, not even a
			// reference; core NATS gets the same from a tiny max_payload.
			opts := natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
			if mode == kwnats.ModeCore {
				opts.MaxPayload = 256
			}
			b := newBroker(t, &embedded{opts: opts})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := b.sinkConfig(mode)
			cfg.Subject = "tiny.{namespace}.{name}"
			if mode == kwnats.ModeJetStream {
				js, err := jetstream.New(b.connect(t))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TINY", Subjects: []string{"tiny.>"},
					Storage: jetstream.MemoryStorage, MaxMsgSize: 64}); err != nil {
					t.Fatal(err)
				}
				cfg.JetStream = &kwnats.JetStream{MaxPending: 16}
			}
			name := "tiny-" + mode
			s := newSink(t, name, cfg)
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			ev, err := encoding.New(bigConfigMap(2, 4<<10))
			if err != nil {
				t.Fatal(err)
			}
			before := testutil.ToFloat64(kwnats.Oversized.WithLabelValues(name, "dropped"))
			err = s.Write(ctx, []*encoding.Event{ev})
			if !errors.Is(err, sinks.ErrPermanent) || !errors.Is(err, sinks.ErrTooLarge) || !strings.Contains(err.Error(), "even as a reference") {
				t.Fatalf("Write = %v; want a permanent, too-large failure that says even the reference was too large", err)
			}
			if d := testutil.ToFloat64(kwnats.Oversized.WithLabelValues(name, "dropped")) - before; d != 1 {
				t.Errorf("kubewire_nats_oversized_events_total{action=dropped} grew by %v, want 1", d)
			}
		})
	}
}

func TestAnOversizedEventWithoutAReferenceEventFailsPermanentlyRatherThanForever(t *testing.T) {
	for _, mode := range []string{kwnats.ModeCore, kwnats.ModeJetStream} {
		t.Run(mode, func(t *testing.T) {
			b := startSmallBroker(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := b.sinkConfig(mode)
			cfg.Subject = "marker.{resource}.{namespace}.{name}"
			if mode == kwnats.ModeJetStream {
				cfg.JetStream = &kwnats.JetStream{MaxPending: 16, Stream: &kwnats.Stream{Name: "MARKER"}}
			}
			s := newSink(t, "marker-"+mode, cfg)
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			// A snapshot marker names no object, so it has no reference.
			c := sinktest.Change(informer.OpSnapshotStarted, "", "", 0)
			c.Object, c.Key, c.SnapshotID = nil, sinktest.Resource.KeyPrefix, strings.Repeat("s", 2*maxPayload)
			ev, err := encoding.New(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, []*encoding.Event{ev}); !errors.Is(err, sinks.ErrPermanent) || !errors.Is(err, sinks.ErrTooLarge) {
				t.Fatalf("Write = %.300v...; want a permanent, too-large failure", err)
			}
		})
	}
}
