package dispatch

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
	"github.com/kubewire/kubewire/sinks"
)

// deliver writes batch until the sink has acknowledged each of its events
// or refused it for good, or the work context ends. It gives up on nothing
// except events that cannot be encoded and events the sink refuses
// permanently; both are logged and counted. After a failure it writes again
// only the events that failed, in their order.
//
// It returns the events and how many entries of batch are still
// undelivered: batch is compacted in place to those, so a caller that is
// cancelled can queue them again.
func (d *Dispatcher) deliver(l *lane, batch []*entry, events []*encoding.Event) ([]*encoding.Event, int) {
	batch, events = d.encode(batch, events)
	if len(events) == 0 {
		return events, 0
	}
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := d.sink.Write(d.work, events)
		d.mPublish.Observe(time.Since(start).Seconds())
		if err == nil {
			d.noteAcked()
			d.setHealthy(true)
			l.blocked(false)
			l.down.Store(false)
			now := time.Now()
			for _, e := range batch {
				d.delivered(e, now)
			}
			return events, 0
		}
		var o outcome
		batch, events, o = d.settle(l, batch, events, err)
		if len(batch) == 0 {
			// The broker answered every event: whatever it refused, the
			// resource's writes are not failing.
			if o.acked > 0 {
				d.noteAcked()
				d.setHealthy(true)
			}
			l.blocked(false)
			return events, 0
		}
		if d.work.Err() != nil {
			return events, len(batch)
		}
		d.setHealthy(false)
		l.blocked(true)
		if o.acked == 0 {
			l.down.Store(true)
		} else {
			l.down.Store(false)
		}
		metrics.WriteRetries.WithLabelValues(d.name).Inc()
		if attempt == 1 || attempt%10 == 0 {
			// The resource is named: a missing topic or stream fails only
			// its own lane, and the log should say which.
			l.log.Warn("sink write failed; retrying", "attempt", attempt, "events", len(batch), "acknowledged", o.acked, "err", err)
		}
		if !b.wait(d.work) {
			return events, len(batch)
		}
	}
}

// encode appends the event of each entry of batch to events, building it on
// an entry's first attempt, and compacts batch in place to the entries that
// encoded, so that batch[i] is the entry of events[i]. An entry that cannot
// be encoded is dropped and counted.
func (d *Dispatcher) encode(batch []*entry, events []*encoding.Event) ([]*entry, []*encoding.Event) {
	kept := batch[:0]
	for _, e := range batch {
		if e.ev == nil {
			ev, err := e.item.Event()
			if err != nil {
				d.log.Error("dropping change that cannot be encoded", "key", e.key, "err", err)
				d.drop(e, "encode")
				d.snapshots.done(e.item.Change)
				continue
			}
			if e.conflated > 0 || e.incomplete > 0 {
				// The event is shared with other sinks; these belong to this one.
				c := ev.Clone()
				if e.conflated > 0 {
					c.SetExtension(encoding.ExtConflated, strconv.Itoa(e.conflated))
					if e.conflatedFrom != "" {
						c.SetExtension(encoding.ExtConflatedFrom, e.conflatedFrom)
					}
				}
				if e.incomplete > 0 {
					c.SetExtension(encoding.ExtIncomplete, strconv.Itoa(e.incomplete))
				}
				ev = c
			}
			e.ev = ev
		}
		kept = append(kept, e)
		events = append(events, e.ev)
	}
	clear(batch[len(kept):])
	return kept, events
}

// errOutcomeCount stands for a BatchError that does not cover the events
// of its Write: a broken adapter, whose failures are all taken as
// transient.
var errOutcomeCount = errors.New("sink reported the outcome of a different number of events than it was given")

// outcome counts what one failed Write did acknowledge.
type outcome struct {
	acked int
	// stalled counts the new events (not retries) that failed only because
	// their part of the sink stalled (sinks.ErrPartStalled).
	stalled int
}

// settle applies what a Write that returned err says of each event:
// acknowledged events are counted as published, events refused for good
// are dropped and counted, and batch and events are compacted in place to
// the rest, which failed transiently. While the work context is ending, a
// refusal is not trusted (the Write may have failed because of the end)
// and its event is kept for the next start. No later event of its key can
// have been acknowledged past it: a Write holds one event of each key.
func (d *Dispatcher) settle(l *lane, batch []*entry, events []*encoding.Event, err error) ([]*entry, []*encoding.Event, outcome) {
	var be *sinks.BatchError
	if errors.As(err, &be) && be.Len() != len(events) {
		l.log.Error("sink reported the outcome of a different number of events than it was given; retrying them all",
			"events", len(events), "outcomes", be.Len(), "err", err)
		// Without the per-event outcome nothing is known to be refused.
		be, err = nil, errOutcomeCount
	}
	ending := d.work.Err() != nil
	now := time.Now()
	var o outcome
	n := 0
	for i := range batch {
		e, ev := batch[i], events[i]
		ierr := err
		if be != nil {
			ierr = be.Err(i)
		}
		if ierr == nil {
			d.delivered(e, now)
			o.acked++
			continue
		}
		if errors.Is(ierr, sinks.ErrPermanent) && !ending {
			d.refused(ev, e, ierr)
			continue
		}
		if !e.retried && errors.Is(ierr, sinks.ErrPartStalled) {
			o.stalled++
		}
		// Kept, whether it failed transiently or its refusal is not
		// trusted at the end.
		batch[n], events[n] = e, ev
		n++
	}
	clear(batch[n:])
	clear(events[n:])
	return batch[:n], events[:n], o
}

// noteAcked records that the sink acknowledged a write since this start.
// It loads first: after the first acknowledgement, writes stay off the
// shared cache line on every batch.
func (d *Dispatcher) noteAcked() {
	if !d.acked.Load() {
		d.acked.Store(true)
	}
}

func (d *Dispatcher) refused(ev *encoding.Event, e *entry, err error) {
	d.log.Error("sink refused event permanently; dropping it", "id", ev.ID(),
		"partitionkey", ev.Extension(encoding.ExtPartitionKey), "err", err)
	d.drop(e, "refused")
}

type backoff struct {
	next, max time.Duration
}

func (d *Dispatcher) newBackoff() *backoff {
	return &backoff{next: d.opt.RetryInitial, max: d.opt.RetryMax}
}

// wait sleeps for the next backoff step, with up to 50% jitter so that many
// shards retrying one broker do not hammer it in lockstep. It returns false
// if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	return tick.Sleep(ctx, b.step())
}

// step returns the next pause and moves the backoff on.
func (b *backoff) step() time.Duration {
	d := b.next + rand.N(b.next/2+1)
	b.next = min(b.next*2, b.max)
	return d
}
