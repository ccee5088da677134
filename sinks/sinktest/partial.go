package sinktest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks"
)

// checkOutcome holds what a Write of evs returned to the per-event
// contract of sinks.Sink.Write: a BatchError covers exactly the events
// written, and no event is acknowledged after an earlier event of its key
// failed transiently (it would have overtaken that event at the broker).
func checkOutcome(t testing.TB, evs []*encoding.Event, err error) {
	t.Helper()
	var be *sinks.BatchError
	if errors.As(err, &be) && be.Len() != len(evs) {
		t.Errorf("a Write of %d events returned a BatchError over %d: %.300v", len(evs), be.Len(), err)
		return
	}
	var failed map[string]string // key -> id of its event that failed transiently
	for i, ev := range evs {
		ierr := sinks.ItemError(err, i)
		k := key(ev)
		if ierr == nil {
			if first, ok := failed[k]; ok {
				t.Errorf("a Write acknowledged event %s after event %s of its key %s failed: the later event overtook the earlier one", ev.ID(), first, k)
			}
			continue
		}
		if errors.Is(ierr, sinks.ErrPermanent) {
			continue
		}
		if failed == nil {
			failed = map[string]string{}
		}
		if _, ok := failed[k]; !ok {
			failed[k] = ev.ID()
		}
	}
}

// contractSink checks every Write of the sink it wraps with checkOutcome,
// so that an adapter's outcomes are checked under the faults the suite
// makes, through a dispatcher too.
type contractSink struct {
	sinks.Sink
	t testing.TB
}

func checked(t testing.TB, s sinks.Sink) sinks.Sink { return &contractSink{Sink: s, t: t} }

func (c *contractSink) Write(ctx context.Context, evs []*encoding.Event) error {
	err := c.Sink.Write(ctx, evs)
	checkOutcome(c.t, evs, err)
	return err
}

// NotifyConnection passes the dispatcher's callback on, if the sink takes
// one, so that the wrapper does not change what the dispatcher sees.
func (c *contractSink) NotifyConnection(up func(bool)) {
	if n, ok := c.Sink.(sinks.ConnectionNotifier); ok {
		n.NotifyConnection(up)
	}
}

// partial writes events of two resources, interleaved, to a destination
// that can take only the first resource's until it is healed, and writes
// again, as the dispatcher does, only what failed. While the second
// resource is blocked, every event of the first must be acknowledged: an
// adapter that fails the whole Write for some of its events makes every
// other event wait. Once healed, everything arrives, each key in order, and
// an event that was never reported failed arrives exactly once.
func partial(t *testing.T, h Harness) {
	s, read, heal := h.Partial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*h.Timeout)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer s.Close(context.Background())

	const keys, perKey = 3, 4
	var sent []*encoding.Event
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			sent = append(sent,
				mustEvent(t, Change(informer.OpUpdated, nsOf(k), "partial-"+strconv.Itoa(k), rv)),
				mustEvent(t, ClusterChange(informer.OpUpdated, "partial-node-"+strconv.Itoa(k), rv)))
		}
	}
	blocked := func(ev *encoding.Event) bool { return strings.HasPrefix(key(ev), ClusterResource.KeyPrefix+"/") }

	everFailed := map[string]bool{}
	pending := sent
	healed := false
	settle := time.Now().Add(settleTime)
	for attempt := 1; len(pending) > 0; attempt++ {
		err := s.Write(ctx, pending)
		checkOutcome(t, pending, err)
		var failed []*encoding.Event
		for i, ev := range pending {
			ierr := sinks.ItemError(err, i)
			switch {
			case ierr == nil:
				if blocked(ev) && !healed {
					t.Fatalf("event %s was acknowledged although its destination cannot take it yet (a harness that does not block?)", ev.ID())
				}
				continue
			case errors.Is(ierr, sinks.ErrPermanent):
				t.Fatalf("event %s was refused for good: %v; a destination that is missing for now is a transient failure", ev.ID(), ierr)
			}
			everFailed[ev.ID()] = true
			failed = append(failed, ev)
		}
		pending = failed
		if !healed {
			waiting := 0
			for _, ev := range pending {
				if !blocked(ev) {
					waiting++
				}
			}
			switch {
			case waiting == 0:
				heal(t)
				healed = true
			case time.Now().After(settle):
				t.Fatalf("%d events the destination can take are still failing after %s while others of their Writes cannot be delivered: "+
					"Write must report each event's outcome (sinks.BatchError), not fail them all; last: %.300v", waiting, settleTime, err)
			}
		}
		if len(pending) == 0 {
			break
		}
		t.Logf("%d events failed (attempt %d), writing them again: %.200v", len(pending), attempt, err)
		select {
		case <-ctx.Done():
			t.Fatalf("%d events still failing when the time ran out: %.300v", len(pending), err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	got := waitForAll(ctx, t, read, sent, h.Timeout)
	checkKeyOrder(t, sent, got)
	copies := map[string]int{}
	for _, ev := range got {
		copies[ev.ID()]++
	}
	for _, ev := range sent {
		if !everFailed[ev.ID()] && copies[ev.ID()] != 1 {
			t.Errorf("event %s, acknowledged at its first Write and never written again, arrived %d times", ev.ID(), copies[ev.ID()])
		}
	}
}
