package memsink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
)

func ev(id string, size int) *event.Event {
	e := event.New()
	e.SetID(id)
	e.SetSource("test")
	e.SetType("test")
	e.SetExtension("partitionkey", "k")
	_ = e.SetData("text/plain", strings.Repeat("x", size))
	return &e
}

func TestEachFaultFailsTheWriteItShouldAndKeepsNothingOfIt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		arm       func(s *memsink.Sink)
		permanent bool // else transient
	}{
		{"The next write fails transiently.", func(s *memsink.Sink) { s.FailNext(1) }, false},
		{"A write during an outage fails transiently.", func(s *memsink.Sink) { s.SetDown(true) }, false},
		{"A write holding a chosen event fails transiently.", func(s *memsink.Sink) { s.FailIf(func(e *event.Event) bool { return e.ID() == "big" }) }, false},
		{"A write refused for good fails permanently.", func(s *memsink.Sink) { s.RefuseAll(errors.New("forbidden")) }, true},
		{"A write holding a refused event fails permanently.", func(s *memsink.Sink) { s.RefuseIf(func(e *event.Event) bool { return e.ID() == "big" }) }, true},
		{"A write holding a too large event fails permanently.", func(s *memsink.Sink) { s.RefuseOver(1000) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &memsink.Sink{}
			tc.arm(s)
			err := s.Write(context.Background(), []*event.Event{ev("small", 10), ev("big", 2000)})
			if err == nil || errors.Is(err, sinks.ErrPermanent) != tc.permanent {
				t.Fatalf("Write = %v; want a failure, permanent: %v", err, tc.permanent)
			}
			if n := len(s.Events()); n != 0 {
				t.Fatalf("a failed write kept %d events", n)
			}
		})
	}
}

func TestFailNextFailsExactlyNWritesThenAcknowledges(t *testing.T) {
	s := &memsink.Sink{}
	s.FailNext(2)
	for i, want := range []bool{false, false, true} {
		if err := s.Write(context.Background(), []*event.Event{ev("a", 1)}); (err == nil) != want {
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
	if err := s.Write(ctx, []*event.Event{ev("a", 1)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a blocked write whose context ended = %v, want its context's error", err)
	}
	done := make(chan error)
	go func() { done <- s.Write(context.Background(), []*event.Event{ev("b", 1)}) }()
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
	if err := s.Write(context.Background(), []*event.Event{ev("a", 1)}); !errors.Is(err, memsink.ErrClosed) {
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
