package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func events(t *testing.T, keys, perKey int) []*encoding.Event {
	t.Helper()
	var out []*encoding.Event
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			ev, err := encoding.New(sinktest.Change(informer.OpUpdated, "ns", "cm-"+strconv.Itoa(k), rv))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ev)
		}
	}
	return out
}

func TestAResentBatchIsStoredOnceBecauseNatsMsgIdDeduplicates(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "dedup.{namespace}.{name}"
	cfg.JetStream = &kwnats.JetStream{MaxPending: 4, Stream: &kwnats.Stream{Name: "DEDUP"}}
	s := newSink(t, "dedup", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	// A window of 4 over 10 keys and 5 events each exercises both limits:
	// the window and one in-flight message per key.
	evs := events(t, 10, 5)
	before := testutil.ToFloat64(kwnats.Duplicates.WithLabelValues("dedup"))
	for attempt := 1; attempt <= 2; attempt++ {
		if err := s.Write(ctx, evs); err != nil {
			t.Fatalf("Write attempt %d: %v", attempt, err)
		}
	}
	js, err := jetstream.New(b.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "DEDUP")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(len(evs)) {
		t.Fatalf("the stream holds %d messages after the batch was sent twice, want %d", n, len(evs))
	}
	if d := testutil.ToFloat64(kwnats.Duplicates.WithLabelValues("dedup")) - before; d != float64(len(evs)) {
		t.Fatalf("kubewire_nats_duplicates_total moved by %v, want %d", d, len(evs))
	}
	if p := testutil.ToFloat64(kwnats.PendingAcks.WithLabelValues("dedup")); p != 0 {
		t.Fatalf("kubewire_nats_pending_acks is %v after every Write returned, want 0", p)
	}
}

func TestAJetStreamWriteWithoutAStreamFailsAndIsRetryable(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "nostream.{name}"
	cfg.PublishTimeout = config.NewDuration(time.Second)
	s := newSink(t, "nostream", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	err := s.Write(ctx, events(t, 2, 1))
	if err == nil {
		t.Fatal("Write succeeded with no stream to store the events")
	}
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("error %v does not wrap jetstream.ErrNoStreamResponse", err)
	}
	if strings.Contains(err.Error(), "permanent") {
		t.Errorf("a missing stream is not permanent (it may be created): %v", err)
	}
}

// Core NATS buffers while it reconnects; past reconnectBufferBytes a publish
// must fail rather than grow memory or vanish silently.
func TestACoreWriteReportsAFullReconnectBufferAndRecoversWhenTheServerReturns(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeCore)
	cfg.Subject = "overflow.{name}"
	cfg.ReconnectBufferBytes = 4096
	cfg.PublishTimeout = config.NewDuration(200 * time.Millisecond)
	s := newSink(t, "overflow", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	b.Stop(t)
	batch := events(t, 20, 1) // about 20 KB, five times the buffer
	var last error
	testkit.Within(t, 20*time.Second, "Write to fail with nats.ErrReconnectBufExceeded while the server is down", func() bool {
		last = s.Write(ctx, batch)
		return errors.Is(last, natsgo.ErrReconnectBufExceeded)
	}, func() string { return fmt.Sprintf("last error: %v", last) })
	if n := testutil.ToFloat64(kwnats.PublishErrors.WithLabelValues("overflow", "buffer_full")); n == 0 {
		t.Error("kubewire_nats_publish_errors_total{reason=buffer_full} did not move")
	}

	b.Start(t)
	testkit.Within(t, 20*time.Second, "Write to succeed once the server is back", func() bool {
		last = s.Write(ctx, batch[:1])
		return last == nil
	}, func() string { return fmt.Sprintf("last error: %v", last) })
}
