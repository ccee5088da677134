package sinktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks"
)

// connected returns a connected sink and its Reader; the test closes it.
func connected(t *testing.T, h Harness) (sinks.Sink, Reader, context.Context) {
	t.Helper()
	s, read := h.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	t.Cleanup(cancel)
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return s, read, ctx
}

// hugeMarker is a snapshot marker whose snapshot id alone is size bytes. A
// marker names no object, so it has no reference event: no broker with a
// limit can take it in any form.
func hugeMarker(size int) *informer.Change {
	return &informer.Change{Op: informer.OpSnapshotStarted, Resource: Resource, Key: Resource.KeyPrefix,
		SnapshotID: strings.Repeat("s", size), Observed: observed}
}

// refusal writes an event no broker can take, alone, then between two
// events it can take, and then through a dispatcher followed by one it can
// take on the same key.
func refusal(t *testing.T, h Harness) {
	s, read, ctx := connected(t, h)
	huge := mustEvent(t, hugeMarker(h.OversizeBytes))
	err := writeSettled(ctx, t, s, []*encoding.Event{huge})
	if !errors.Is(err, sinks.ErrPermanent) {
		s.Close(context.Background())
		t.Fatalf("Write of an event the broker can never take = %.300v; want an error wrapping sinks.ErrPermanent, "+
			"or the dispatcher retries it forever and every later event of its key waits behind it", err)
	}
	// Between two events the broker takes, the refusal names the refused
	// event alone: the others are acknowledged, not refused with it and not
	// left for a rewrite one at a time.
	around := []*encoding.Event{
		mustEvent(t, Change(informer.OpUpdated, "team-0", "next-to-refused", 1)),
		huge,
		mustEvent(t, Change(informer.OpUpdated, "team-0", "next-to-refused", 2)),
	}
	err = writeSettled(ctx, t, s, around)
	if e := sinks.ItemError(err, 1); !errors.Is(e, sinks.ErrPermanent) {
		t.Errorf("the event the broker can never take, written between two others, failed with %.300v; want sinks.ErrPermanent", e)
	}
	for _, i := range []int{0, 2} {
		if e := sinks.ItemError(err, i); e != nil {
			t.Errorf("event %s, written next to one the broker refuses, failed with %.300v; want it acknowledged "+
				"(a refusal must name its event, in a sinks.BatchError)", around[i].ID(), e)
		}
	}
	if !t.Failed() {
		got := waitForAll(ctx, t, read, []*encoding.Event{around[0], around[2]}, h.Timeout)
		checkKeyOrder(t, []*encoding.Event{around[0], around[2]}, got)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}

	s, read = h.New(t)
	d := startDispatcher(t, "sinktest-refusal", s)
	next := &informer.Change{Op: informer.OpSnapshotCompleted, Resource: Resource, Key: Resource.KeyPrefix,
		SnapshotID: "snap-after", Observed: observed}
	d.Enqueue(dispatch.NewItem(hugeMarker(h.OversizeBytes)))
	d.Enqueue(dispatch.NewItem(next))
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("the dispatcher reported %d events undelivered; want the refused one dropped and the next delivered", n)
	}
	waitForAll(ctx, t, read, []*encoding.Event{mustEvent(t, next)}, h.Timeout)
}

// oversize writes an object's event too large for the broker between two
// that fit, on the same key.
func oversize(t *testing.T, h Harness) {
	s, read, ctx := connected(t, h)
	defer s.Close(context.Background())
	before := Change(informer.OpUpdated, "team-0", "big", 1)
	bigObject := Object("team-0", "big", 2)
	bigObject.Object["data"] = map[string]any{"blob": strings.Repeat("x", h.OversizeBytes)}
	big := ChangeOf(informer.OpUpdated, bigObject)
	after := Change(informer.OpUpdated, "team-0", "big", 3)
	sent := []*encoding.Event{mustEvent(t, before), mustEvent(t, big), mustEvent(t, after)}
	err := writeSettled(ctx, t, s, sent)
	switch {
	case errors.Is(err, sinks.ErrPermanent):
		t.Logf("the adapter refused the oversized event permanently: %.300v", err)
		// The events around it are not refused with it.
		for _, i := range []int{0, 2} {
			if e := sinks.ItemError(err, i); e != nil {
				t.Fatalf("event %s, next to the oversized one, failed with %.300v; want it acknowledged "+
					"(a refusal must name its event, in a sinks.BatchError)", sent[i].ID(), e)
			}
		}
		neighbours := []*encoding.Event{sent[0], sent[2]}
		checkKeyOrder(t, neighbours, waitForAll(ctx, t, read, neighbours, h.Timeout))
		return
	case err != nil:
		t.Fatalf("Write with an oversized event = %.300v; want success (with a reference event in its place) "+
			"or an error wrapping sinks.ErrPermanent, not a failure the dispatcher retries forever", err)
	}
	got := waitForAll(ctx, t, read, sent, h.Timeout)
	checkKeyOrder(t, sent, got)
	for _, ev := range got {
		if ev.ID() != sent[1].ID() {
			continue
		}
		if p, _ := ev.Extensions()[encoding.ExtPayload].(string); p != encoding.PayloadReference {
			t.Errorf("the oversized event arrived with payload=%q, want %q", p, encoding.PayloadReference)
		}
		if len(ev.Data()) >= h.OversizeBytes {
			t.Errorf("the oversized event arrived whole (%d bytes of data), not as its reference", len(ev.Data()))
		}
	}
}

// settleTime is how long writeSettled retries a failure that is not
// permanent.
const settleTime = 15 * time.Second

// writeSettled writes evs until the adapter gives its answer for each of
// them: acknowledged or refused for good. A topic or stream just created
// can fail a write for a moment (a partition whose leader is not elected
// yet), which the dispatcher retries; so, as the dispatcher does, it
// writes again the events that failed transiently, and only them, and
// only a failure that lasts settleTime counts as the answer. It returns
// what it learned of each event as a Write would: nil if every event was
// acknowledged, else a BatchError over evs.
func writeSettled(ctx context.Context, t *testing.T, s sinks.Sink, evs []*encoding.Event) error {
	t.Helper()
	deadline := time.Now().Add(settleTime)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	outcome := make([]error, len(evs))
	pending := make([]int, len(evs))
	for i := range pending {
		pending[i] = i
	}
	batch := make([]*encoding.Event, 0, len(evs))
	for {
		batch = batch[:0]
		for _, i := range pending {
			batch = append(batch, evs[i])
		}
		err := s.Write(ctx, batch)
		checkOutcome(t, batch, err)
		var failed []int
		for j, i := range pending {
			outcome[i] = sinks.ItemError(err, j)
			if outcome[i] != nil && !errors.Is(outcome[i], sinks.ErrPermanent) {
				failed = append(failed, i)
			}
		}
		pending = failed
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		t.Logf("%d events failed for now, writing them again as the dispatcher would: %.200v", len(pending), err)
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	be := sinks.NewBatchError(len(evs))
	for i, err := range outcome {
		be.Failed(i, err)
	}
	return be.ErrorOrNil()
}

func writeAfterClose(t *testing.T, h Harness) {
	s, _, ctx := connected(t, h)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := noPanic(t, "Write after Close", func() error {
		return s.Write(ctx, []*encoding.Event{mustEvent(t, Change(informer.OpAdded, "team-0", "late", 1))})
	})
	if err == nil {
		t.Fatal("Write after Close succeeded; want an error, since nothing delivers it")
	}
}

func closeTwice(t *testing.T, h Harness) {
	s, _, ctx := connected(t, h)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := noPanic(t, "the second Close", func() error { return s.Close(ctx) }); err != nil {
		t.Fatalf("the second Close = %v, want nil", err)
	}
}

// noPanic runs f, failing the test if it panics.
func noPanic(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	}()
	return f()
}
