// Package memsink is an in-memory sinks.Sink for tests. It records what it
// acknowledges and injects the faults a broker shows: transient failures of
// whole writes (the next N writes, a random share, an outage, writes holding
// certain events) and of chosen events alone, permanent refusals (of every
// write, of certain events, of events too large), writes that block until
// released, and a connection reported lost through sinks.ConnectionNotifier.
// A fault of chosen events fails those events only and reports them in a
// sinks.BatchError, as the Write contract asks of a real adapter.
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
	"slices"
	"sync"

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
	got      []*encoding.Event
	batches  [][]*encoding.Event
	writes   int
	closed   bool
	failNext int
	failRate float64
	down     bool
	failIf   func(*encoding.Event) bool
	refuse   error
	refuseIf func(*encoding.Event) bool
	maxBytes int
	failEach func(*encoding.Event) error
	blocked  chan struct{}
	up       func(bool)
	// noConnect, while set, is what Connect returns; connects counts the
	// calls.
	noConnect error
	connects  int
}

var (
	_ sinks.Sink               = (*Sink)(nil)
	_ sinks.ConnectionNotifier = (*Sink)(nil)
)

// Connect succeeds, unless RefuseConnect set an error.
func (s *Sink) Connect(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connects++
	return s.noConnect
}

// RefuseConnect makes Connect fail with err, as a broker that cannot be
// reached does; nil lets it succeed again.
func (s *Sink) RefuseConnect(err error) { s.set(func() { s.noConnect = err }) }

// Connects is the number of Connect calls so far.
func (s *Sink) Connects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

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

// Write acknowledges evs, unless a fault applies. These fail the whole
// write and keep nothing, in this order: closed, blocked (waits for the
// release or ctx), failing next, down, random failure, a write holding an
// event FailIf selects, every write refused. Then each event on its own may
// be refused (RefuseIf, RefuseOver) or fail as FailEach says; the others are
// kept. As the Write contract asks, an event whose key had an earlier event
// of the write fail transiently is not kept either: it fails with
// sinks.ErrNotSent.
func (s *Sink) Write(ctx context.Context, evs []*encoding.Event) error {
	s.mu.Lock()
	s.writes++
	s.batches = append(s.batches, slices.Clone(evs))
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
	var be *sinks.BatchError
	var held map[string]bool // keys with an event that failed transiently
	for i, ev := range evs {
		var err error
		if held[key(ev)] {
			err = fmt.Errorf("memsink: event %s follows a failed event of its key: %w", ev.ID(), sinks.ErrNotSent)
		} else {
			err = s.eventFault(ev)
		}
		if err == nil {
			s.got = append(s.got, ev)
			continue
		}
		if be == nil {
			be = sinks.NewBatchError(len(evs))
		}
		be.Failed(i, err)
		if !errors.Is(err, sinks.ErrPermanent) {
			if held == nil {
				held = map[string]bool{}
			}
			held[key(ev)] = true
		}
	}
	return be.ErrorOrNil()
}

func (s *Sink) fault(evs []*encoding.Event) error {
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
	return nil
}

// eventFault is the failure of ev alone, if any.
func (s *Sink) eventFault(ev *encoding.Event) error {
	if s.refuseIf != nil && s.refuseIf(ev) {
		return sinks.Permanent(fmt.Errorf("memsink: refused %s", ev.ID()))
	}
	if s.maxBytes > 0 {
		if b, _ := json.Marshal(ev); len(b) > s.maxBytes {
			return sinks.Permanent(sinks.TooLarge(fmt.Errorf("memsink: event %s is too large: %d bytes, the limit is %d", ev.ID(), len(b), s.maxBytes)))
		}
	}
	if s.failEach != nil {
		return s.failEach(ev)
	}
	return nil
}

// Events returns a copy of what the sink acknowledged, in order.
func (s *Sink) Events() []*encoding.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*encoding.Event(nil), s.got...)
}

// Batches returns the events of every call of Write, in call order, failed
// ones included: what the dispatcher sent, and sent again.
func (s *Sink) Batches() [][]*encoding.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
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
func (s *Sink) FailIf(f func(*encoding.Event) bool) { s.set(func() { s.failIf = f }) }

// RefuseAll makes every write fail permanently with err (nil stops it).
func (s *Sink) RefuseAll(err error) { s.set(func() { s.refuse = err }) }

// RefuseIf refuses, permanently, each event f selects; the rest of its
// write goes through.
func (s *Sink) RefuseIf(f func(*encoding.Event) bool) { s.set(func() { s.refuseIf = f }) }

// RefuseOver refuses, permanently and as too large (sinks.ErrTooLarge),
// each event larger than n bytes as JSON; the rest of its write goes
// through. 0 lifts the limit.
func (s *Sink) RefuseOver(n int) { s.set(func() { s.maxBytes = n }) }

// FailEach fails each event for which f returns an error, with that error:
// transient unless it wraps sinks.ErrPermanent. The rest of the write goes
// through, except later events of a key whose event failed transiently
// (see Write). A nil f stops it.
func (s *Sink) FailEach(f func(*encoding.Event) error) { s.set(func() { s.failEach = f }) }

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

func key(ev *encoding.Event) string {
	k, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	return k
}
