package memsink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
)

func ev(id string, size int) *encoding.Event {
	return evKey(id, "k", size)
}

func evKey(id, key string, size int) *encoding.Event {
	e := event.New()
	e.SetID(id)
	e.SetSource("test")
	e.SetType("test")
	e.SetExtension("partitionkey", key)
	_ = e.SetData("text/plain", strings.Repeat("x", size))
	k, err := encoding.FromCloudEvent(&e)
	if err != nil {
		panic(err)
	}
	return k
}

func ids(evs []*encoding.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID())
	}
	return strings.Join(out, ",")
}

func TestEachFaultFailsTheWriteItShouldAndKeepsNothingOfIt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		arm       func(s *memsink.Sink)
		permanent bool // else transient
	}{
		{"The next write fails transiently.", func(s *memsink.Sink) { s.FailNext(1) }, false},
		{"A write during an outage fails transiently.", func(s *memsink.Sink) { s.SetDown(true) }, false},
		{"A write holding a chosen event fails transiently.", func(s *memsink.Sink) { s.FailIf(func(e *encoding.Event) bool { return e.ID() == "big" }) }, false},
		{"A write refused for good fails permanently.", func(s *memsink.Sink) { s.RefuseAll(errors.New("forbidden")) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &memsink.Sink{}
			tc.arm(s)
			err := s.Write(context.Background(), []*encoding.Event{ev("small", 10), ev("big", 2000)})
			if err == nil || errors.Is(err, sinks.ErrPermanent) != tc.permanent {
				t.Fatalf("Write = %v; want a failure, permanent: %v", err, tc.permanent)
			}
			if n := len(s.Events()); n != 0 {
				t.Fatalf("a failed write kept %d events", n)
			}
		})
	}
}

// A refusal of an event is the broker's answer for that event alone: the
// Write reports it in a BatchError and the rest of the write is kept.
func TestARefusedEventFailsPermanentlyAloneAndTheRestOfItsWriteIsKept(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arm      func(s *memsink.Sink)
		tooLarge bool
	}{
		{"A refused event fails permanently.", func(s *memsink.Sink) { s.RefuseIf(func(e *encoding.Event) bool { return e.ID() == "big" }) }, false},
		{"A too large event fails permanently as too large.", func(s *memsink.Sink) { s.RefuseOver(1000) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &memsink.Sink{}
			tc.arm(s)
			err := s.Write(context.Background(), []*encoding.Event{ev("small", 10), ev("big", 2000), ev("after", 10)})
			var be *sinks.BatchError
			if !errors.As(err, &be) || be.Failures() != 1 {
				t.Fatalf("Write = %v; want a BatchError naming one event", err)
			}
			if e := be.Err(1); !errors.Is(e, sinks.ErrPermanent) || errors.Is(e, sinks.ErrTooLarge) != tc.tooLarge {
				t.Fatalf("the big event failed with %v; want permanent, too large: %v", e, tc.tooLarge)
			}
			if got := ids(s.Events()); got != "small,after" {
				t.Fatalf("kept %s, want small,after: a refused event does not hold back its key", got)
			}
		})
	}
}

func TestFailEachFailsTheChosenEventsAndHoldsBackTheirKeysLaterEvents(t *testing.T) {
	s := &memsink.Sink{}
	down := errors.New("partition leader moved")
	s.FailEach(func(e *encoding.Event) error {
		switch e.ID() {
		case "a1":
			return down
		case "c1":
			return sinks.Permanent(errors.New("forbidden"))
		}
		return nil
	})
	batch := []*encoding.Event{evKey("a1", "a", 1), evKey("b1", "b", 1), evKey("a2", "a", 1), evKey("c1", "c", 1), evKey("c2", "c", 1), evKey("b2", "b", 1)}
	err := s.Write(context.Background(), batch)
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Len() != len(batch) {
		t.Fatalf("Write = %v; want a BatchError over the %d events", err, len(batch))
	}
	for i, want := range []error{down, nil, sinks.ErrNotSent, sinks.ErrPermanent, nil, nil} {
		if got := be.Err(i); (got == nil) != (want == nil) || want != nil && !errors.Is(got, want) {
			t.Errorf("%s: %v, want %v", batch[i].ID(), got, want)
		}
	}
	if got := ids(s.Events()); got != "b1,c2,b2" {
		t.Errorf("kept %s, want b1,c2,b2", got)
	}
	s.FailEach(nil)
	if err := s.Write(context.Background(), []*encoding.Event{batch[0], batch[2]}); err != nil {
		t.Fatalf("the retry of a1 and a2 = %v", err)
	}
	var writes []string
	for _, b := range s.Batches() {
		writes = append(writes, ids(b))
	}
	if got, want := strings.Join(writes, " | "), "a1,b1,a2,c1,c2,b2 | a1,a2"; got != want {
		t.Errorf("Batches = %s, want %s", got, want)
	}
}

func TestFailNextFailsExactlyNWritesThenAcknowledges(t *testing.T) {
	s := &memsink.Sink{}
	s.FailNext(2)
	for i, want := range []bool{false, false, true} {
		if err := s.Write(context.Background(), []*encoding.Event{ev("a", 1)}); (err == nil) != want {
			t.Fatalf("write %d = %v, want success %v", i+1, err, want)
		}
	}
	if len(s.Events()) != 1 || s.Writes() != 3 {
		t.Fatalf("kept %d events over %d writes, want 1 over 3", len(s.Events()), s.Writes())
	}
}

func TestABlockedWriteWaitsForTheReleaseOrItsContext(t *testing.T) {
	s := &memsink.Sink{}
	release := s.Block()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Write(ctx, []*encoding.Event{ev("a", 1)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a blocked write whose context ended = %v, want its context's error", err)
	}
	done := make(chan error)
	go func() { done <- s.Write(context.Background(), []*encoding.Event{ev("b", 1)}) }()
	release()
	if err := <-done; err != nil || len(s.Events()) != 1 {
		t.Fatalf("the released write = %v with %d events kept, want success with 1", err, len(s.Events()))
	}
}

func TestAWriteAfterCloseFailsAndClosingTwiceIsHarmless(t *testing.T) {
	s := &memsink.Sink{}
	for range 2 {
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Write(context.Background(), []*encoding.Event{ev("a", 1)}); !errors.Is(err, memsink.ErrClosed) {
		t.Fatalf("Write after Close = %v, want ErrClosed", err)
	}
}

func TestSetConnectedReachesTheDispatchersCallback(t *testing.T) {
	s := &memsink.Sink{}
	s.SetConnected(false) // nobody listens yet: nothing happens
	var got []bool
	s.NotifyConnection(func(up bool) { got = append(got, up) })
	s.SetConnected(false)
	s.SetConnected(true)
	if len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("the callback saw %v, want [false true]", got)
	}
}
