package nats_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// These tests read kubewire's messages with sdk-go's own NATS and JetStream
// receivers (protocol/nats/v2 and protocol/nats_jetstream/v2), not with
// kubewire's decoder. Those modules are test-only dependencies: nothing in
// the binary imports them.

func interopChanges() []*informer.Change {
	c := sinktest.Change
	return []*informer.Change{c(informer.OpAdded, "team-a", "a", 1), c(informer.OpUpdated, "team-a", "a", 2), c(informer.OpDeleted, "team-a", "a", 3)}
}

// receive reads n events through an sdk-go receiver.
func receive(t *testing.T, r protocol.Receiver, n int) []*event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*event.Event
	for len(out) < n {
		m, err := r.Receive(ctx)
		if err != nil {
			t.Fatalf("sdk-go receiver, after %d of %d events: %v", len(out), n, err)
		}
		ev, err := binding.ToEvent(ctx, m)
		if err != nil {
			t.Fatalf("sdk-go cannot read kubewire's message (encoding %v): %v", m.ReadEncoding(), err)
		}
		_ = m.Finish(nil)
		out = append(out, ev)
	}
	return out
}

// sameEvents requires sdk-go to have read exactly what kubewire sent:
// every attribute and extension, and data that is the same JSON.
func sameEvents(t *testing.T, got []*event.Event, changes []*informer.Change) {
	t.Helper()
	if len(got) != len(changes) {
		t.Fatalf("read %d events, want %d", len(got), len(changes))
	}
	for i, c := range changes {
		want, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		g := got[i]
		if g.ID() != want.ID() || g.Type() != want.Type() || g.Source() != want.Source() || g.Subject() != want.Subject() ||
			!g.Time().Equal(want.Time()) || g.SpecVersion() != want.SpecVersion() || g.DataContentType() != want.DataContentType() {
			t.Errorf("event %d: sdk-go read context\n%v\nwant\n%v", i, g.Context, want)
		}
		if !reflect.DeepEqual(stringExts(g), stringExts(want)) {
			t.Errorf("event %d: sdk-go read extensions %v, want %v", i, stringExts(g), stringExts(want))
		}
		var gd, wd any
		if err := json.Unmarshal(g.Data(), &gd); err != nil {
			t.Fatalf("event %d: data is not JSON: %v", i, err)
		}
		_ = json.Unmarshal(want.Data(), &wd)
		if !reflect.DeepEqual(gd, wd) {
			t.Errorf("event %d: sdk-go read data\n%s\nwant\n%s", i, g.Data(), want.Data())
		}
	}
}

func stringExts(ev interface{ Extensions() map[string]any }) map[string]string {
	out := map[string]string{}
	for k, v := range ev.Extensions() {
		out[k] = v.(string)
	}
	return out
}

func TestSdkGosJetStreamReceiverReadsKubewiresBinaryAndStructuredMessages(t *testing.T) {
	b := startBroker(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			stream := "SDK" + mode
			cfg := b.sinkConfig(kwnats.ModeJetStream)
			cfg.ContentMode = mode
			cfg.Subject = stream + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
			cfg.JetStream = &kwnats.JetStream{Stream: &kwnats.Stream{Name: stream}}
			s := newSink(t, "js", cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			changes := interopChanges()
			for _, c := range changes {
				ev, err := encoding.New(c)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
					t.Fatal(err)
				}
			}

			nc := b.connect(t)
			cons, err := cejs.NewConsumerFromConn(nc, stream, stream+".>", nil, []natsgo.SubOpt{natsgo.DeliverAll(), natsgo.AckNone()})
			if err != nil {
				t.Fatal(err)
			}
			open := openInbound(t, cons)
			sameEvents(t, receive(t, cons, len(changes)), changes)
			open()
		})
	}
}

// openInbound runs the receiver's OpenInbound until the returned func
// stops it.
func openInbound(t *testing.T, r interface {
	OpenInbound(context.Context) error
}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.OpenInbound(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("OpenInbound: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestSdkGosCoreNATSReceiverReadsKubewiresStructuredMessagesAndItsJetStreamMessageReadsBinaryOnes(t *testing.T) {
	b := startBroker(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			cfg := b.sinkConfig(kwnats.ModeCore)
			cfg.ContentMode = mode
			cfg.Subject = "core" + mode + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
			s := newSink(t, "core", cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })

			nc := b.connect(t)
			var r interface {
				protocol.Receiver
				OpenInbound(context.Context) error
			}
			if mode == config.ContentModeStructured {
				cons, err := cenats.NewConsumerFromConn(nc, "core"+mode+".>")
				if err != nil {
					t.Fatal(err)
				}
				r = cons
			} else {
				// protocol/nats/v2 reads structured mode only (its
				// Message never reports binary encoding); sdk-go's
				// binary reader for NATS headers is the JetStream
				// protocol's Message, which works on any NATS message.
				r = &binaryCoreReceiver{nc: nc, subject: "core" + mode + ".>", msgs: make(chan *natsgo.Msg, 16)}
			}
			stop := openInbound(t, r)
			defer stop()
			// Core NATS keeps nothing: publish only once the server has the
			// receiver's subscription.
			deadline := time.Now().Add(10 * time.Second)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for nc.NumSubscriptions() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the sdk-go receiver did not subscribe")
				}
				<-tick.C
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			changes := interopChanges()
			for _, c := range changes {
				ev, err := encoding.New(c)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
					t.Fatal(err)
				}
			}
			sameEvents(t, receive(t, r, len(changes)), changes)
		})
	}
}

// binaryCoreReceiver subscribes to core NATS and hands each message to
// sdk-go as a nats_jetstream Message, sdk-go's reader of binary-mode NATS
// headers.
type binaryCoreReceiver struct {
	nc      *natsgo.Conn
	subject string
	msgs    chan *natsgo.Msg
}

func (r *binaryCoreReceiver) OpenInbound(ctx context.Context) error {
	sub, err := r.nc.ChanSubscribe(r.subject, r.msgs)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

func (r *binaryCoreReceiver) Receive(ctx context.Context) (binding.Message, error) {
	select {
	case m := <-r.msgs:
		return cejs.NewMessage(m), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
