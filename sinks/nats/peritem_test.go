package nats_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func label(ev interface{ Extensions() map[string]any }) string {
	return extString(ev, encoding.ExtNamespace) + "/" + extString(ev, encoding.ExtName) + "@" + extString(ev, encoding.ExtResourceVersion)
}

// A stream captures one namespace's subjects and not another's. A Write
// over both reports the events without a stream as failed, transiently,
// and acknowledges the others, which the stream holds once each. Written
// again once the stream captures them, the failed events follow, each key
// in order.
func TestAJetStreamWriteReportsEachEventAndTheStreamTakesThoseItCaptures(t *testing.T) {
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(b.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	sc := jetstream.StreamConfig{Name: "PERITEM", Subjects: []string{"peritem.team-a.>"}}
	st, err := js.CreateStream(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "peritem.{namespace}.{name}"
	cfg.PublishTimeout = config.NewDuration(time.Second)
	cfg.JetStream = &kwnats.JetStream{MaxPending: 4}
	s := newSink(t, "peritem", cfg)
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	var evs []*encoding.Event
	var rvs []int
	for rv := 1; rv <= 3; rv++ {
		for k := range 3 {
			for _, ns := range []string{"team-b", "team-a"} {
				ev, err := encoding.New(sinktest.Change(informer.OpUpdated, ns, "cm-"+strconv.Itoa(k), rv))
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
				rvs = append(rvs, rv)
			}
		}
	}
	err = s.Write(ctx, evs)
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Len() != len(evs) {
		t.Fatalf("Write with one namespace's stream missing = %.300v; want a sinks.BatchError over its %d events", err, len(evs))
	}
	var failed []*encoding.Event
	for i, ev := range evs {
		e := be.Err(i)
		captured := strings.HasPrefix(label(ev), "team-a/")
		switch {
		case captured && e != nil:
			t.Errorf("%s, which the stream captures: %v; want it acknowledged", label(ev), e)
		case !captured && (e == nil || errors.Is(e, sinks.ErrPermanent)):
			t.Errorf("%s, which no stream captures: %v; want a transient failure", label(ev), e)
		case !captured && rvs[i] == 1 && errors.Is(e, sinks.ErrNotSent):
			t.Errorf("%s, its object's first event: %v; want the server's refusal", label(ev), e)
		case !captured && rvs[i] > 1 && !errors.Is(e, sinks.ErrNotSent):
			// Published only after the PubAck of its object's event
			// before it, so never, since that one failed.
			t.Errorf("%s, after its object's failed event: %v; want it not sent", label(ev), e)
		}
		if e != nil {
			failed = append(failed, ev)
		}
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != uint64(len(evs)-len(failed)) {
		t.Fatalf("the stream holds %v messages (%v), want the %d acknowledged", info.State.Msgs, err, len(evs)-len(failed))
	}

	sc.Subjects = []string{"peritem.>"}
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, failed); err != nil {
		t.Fatalf("the retry of the failed events: %v", err)
	}
	seen := map[string]int{}
	last := map[string]int{}
	for _, m := range streamMessages(ctx, t, js, "PERITEM") {
		ev, err := decode(m.header, m.data)
		if err != nil {
			t.Fatal(err)
		}
		seen[ev.ID()]++
		k := extString(ev, encoding.ExtPartitionKey)
		rv, _ := strconv.Atoi(extString(ev, encoding.ExtResourceVersion))
		if rv < last[k] {
			t.Errorf("%s: rv %d after %d", k, rv, last[k])
		}
		last[k] = rv
	}
	for _, ev := range evs {
		if seen[ev.ID()] != 1 {
			t.Errorf("%s is in the stream %d times, want once", label(ev), seen[ev.ID()])
		}
	}
}

// An event refused even as its reference (a snapshot marker has none) is
// refused alone: the events around it are published and acknowledged, in
// core NATS and in JetStream alike.
func TestAnEventRefusedEvenAsAReferenceFailsAloneAndTheEventsAroundItArePublished(t *testing.T) {
	for _, mode := range []string{kwnats.ModeCore, kwnats.ModeJetStream} {
		t.Run(mode, func(t *testing.T) {
			b := startSmallBroker(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nc := b.connect(t)
			cfg := b.sinkConfig(mode)
			cfg.Subject = "alone.{resource}.{namespace}.{name}"
			if mode == kwnats.ModeJetStream {
				cfg.JetStream = &kwnats.JetStream{MaxPending: 16, Stream: &kwnats.Stream{Name: "ALONE"}}
			}
			s := newSink(t, "alone-"+mode, cfg)
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			var mu sync.Mutex
			var got []string
			sub, err := nc.Subscribe("alone.>", func(m *natsgo.Msg) {
				ev, err := decode(m.Header, m.Data)
				if err != nil {
					t.Errorf("undecodable message on %s: %v", m.Subject, err)
					return
				}
				mu.Lock()
				got = append(got, label(ev))
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}

			huge := sinktest.Change(informer.OpSnapshotStarted, "", "", 0)
			huge.Object, huge.Key, huge.SnapshotID = nil, sinktest.Resource.KeyPrefix, strings.Repeat("s", 2*maxPayload)
			var evs []*encoding.Event
			for _, c := range []*informer.Change{
				sinktest.Change(informer.OpUpdated, "team-a", "next", 1), huge, sinktest.Change(informer.OpUpdated, "team-a", "next", 2),
			} {
				ev, err := encoding.New(c)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
			}
			err = s.Write(ctx, evs)
			var be *sinks.BatchError
			if !errors.As(err, &be) || be.Len() != 3 {
				t.Fatalf("Write = %.300v; want a sinks.BatchError over its 3 events", err)
			}
			if e := be.Err(1); !errors.Is(e, sinks.ErrPermanent) || !errors.Is(e, sinks.ErrTooLarge) {
				t.Errorf("the huge marker failed with %v; want a permanent, too-large refusal", e)
			}
			for _, i := range []int{0, 2} {
				if e := be.Err(i); e != nil {
					t.Errorf("%s failed with %v; want it acknowledged", label(evs[i]), e)
				}
			}
			want := "team-a/next@1,team-a/next@2"
			var last string
			testkit.Within(t, 10*time.Second, "the subscriber to receive "+want, func() bool {
				mu.Lock()
				defer mu.Unlock()
				last = strings.Join(got, ",")
				return last == want
			}, func() string { return "received " + last })
		})
	}
}
