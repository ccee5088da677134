// Package memsink is an in-memory sinks.Sink for tests. It records what it
// acknowledges and injects the faults a broker shows: transient failures (the
// next N writes, a random share, an outage, writes holding certain events),
// permanent refusals (for good, of certain events, of events too large),
// writes that block until released, and a connection reported lost through
// sinks.ConnectionNotifier.
//
// It lives apart from testkit because it imports sinks, which imports
// informer: those packages' own tests can use testkit but not memsink.
package memsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks"
)

// ErrDown is the transient failure the sink injects.
var ErrDown = errors.New("memsink: broker down")

// ErrClosed is what Write returns after Close.
var ErrClosed = errors.New("memsink: write after close")

// Sink is an in-memory sink. The zero value acknowledges every write.
type Sink struct {
	mu       sync.Mutex
	got      []*event.Event
	writes   int
	closed   bool
	failNext int
	failRate float64
	down     bool
	failIf   func(*event.Event) bool
	refuse   error
	refuseIf func(*event.Event) bool
	maxBytes int
	blocked  chan struct{}
	up       func(bool)
}

var (
	_ sinks.Sink               = (*Sink)(nil)
	_ sinks.ConnectionNotifier = (*Sink)(nil)
)

// Connect succeeds.
func (s *Sink) Connect(context.Context) error { return nil }

// Close marks the sink closed: later writes fail with ErrClosed. Closing
// twice is harmless.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// NotifyConnection keeps up for SetConnected.
func (s *Sink) NotifyConnection(up func(bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = up
}

// Write acknowledges evs, unless a fault applies, in this order: closed,
// blocked (waits for the release or ctx), failing next, down, random
// failure, a transient failure for an event, a permanent refusal, an event
// too large. A failed write keeps nothing.
func (s *Sink) Write(ctx context.Context, evs []*event.Event) error {
	s.mu.Lock()
	s.writes++
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if b := s.blocked; b != nil {
		s.mu.Unlock()
		select {
		case <-b:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if err := s.fault(evs); err != nil {
		return err
	}
	s.got = append(s.got, evs...)
	return nil
}

func (s *Sink) fault(evs []*event.Event) error {
	switch {
	case s.failNext > 0:
		s.failNext--
		return ErrDown
	case s.down:
		return ErrDown
	case s.failRate > 0 && rand.Float64() < s.failRate:
		return ErrDown
	case s.refuse != nil:
		return sinks.Permanent(s.refuse)
	}
	for _, ev := range evs {
		if s.failIf != nil && s.failIf(ev) {
			return fmt.Errorf("writing %s: %w", key(ev), ErrDown)
		}
	}
	for _, ev := range evs {
		if s.refuseIf != nil && s.refuseIf(ev) {
			return sinks.Permanent(fmt.Errorf("memsink: refused %s", ev.ID()))
		}
		if s.maxBytes > 0 {
			if b, _ := json.Marshal(ev); len(b) > s.maxBytes {
				return sinks.Permanent(fmt.Errorf("memsink: event %s is too large: %d bytes, the limit is %d", ev.ID(), len(b), s.maxBytes))
			}
		}
	}
	return nil
}

// Events returns a copy of what the sink acknowledged, in order.
func (s *Sink) Events() []*event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*event.Event(nil), s.got...)
}

// Writes counts the calls of Write, failed ones included.
func (s *Sink) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// FailNext makes the next n writes fail transiently.
func (s *Sink) FailNext(n int) { s.set(func() { s.failNext = n }) }

// FailRate makes each write fail transiently with probability p.
func (s *Sink) FailRate(p float64) { s.set(func() { s.failRate = p }) }

// SetDown makes every write fail transiently while down holds: an outage.
func (s *Sink) SetDown(down bool) { s.set(func() { s.down = down }) }

// FailIf makes a write holding an event f selects fail transiently.
func (s *Sink) FailIf(f func(*event.Event) bool) { s.set(func() { s.failIf = f }) }

// RefuseAll makes every write fail permanently with err (nil stops it).
func (s *Sink) RefuseAll(err error) { s.set(func() { s.refuse = err }) }

// RefuseIf makes a write holding an event f selects fail permanently.
func (s *Sink) RefuseIf(f func(*event.Event) bool) { s.set(func() { s.refuseIf = f }) }

// RefuseOver makes a write holding an event larger than n bytes (as JSON)
// fail permanently as too large; 0 lifts the limit.
func (s *Sink) RefuseOver(n int) { s.set(func() { s.maxBytes = n }) }

// Block makes writes wait until release is called (or their context ends).
func (s *Sink) Block() (release func()) {
	ch := make(chan struct{})
	s.set(func() { s.blocked = ch })
	var once sync.Once
	return func() {
		once.Do(func() {
			s.set(func() { s.blocked = nil })
			close(ch)
		})
	}
}

// SetConnected reports the connection lost (false) or back (true) to the
// dispatcher, as a client's callbacks would. It does nothing before the
// dispatcher asked to be notified.
func (s *Sink) SetConnected(up bool) {
	s.mu.Lock()
	f := s.up
	s.mu.Unlock()
	if f != nil {
		f(up)
	}
}

func (s *Sink) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func key(ev *event.Event) string {
	k, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	return k
}
