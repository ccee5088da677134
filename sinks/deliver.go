package sinks

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/metrics"
)

// deliver writes batch until the sink acknowledges it or the work context
// ends. It gives up on nothing except events that cannot be encoded and
// events the sink refuses permanently; both are logged and counted.
//
// It returns the events and how many entries of batch it kept: batch is
// compacted in place to those, so a caller that is cancelled can queue them
// again.
func (d *Dispatcher) deliver(l *lane, batch []*entry, events []*event.Event) ([]*event.Event, int) {
	// batch is compacted in place to the entries that encoded, so that
	// batch[i] is the entry of events[i].
	kept := batch[:0]
	for _, e := range batch {
		ev, err := e.item.Event()
		if err != nil {
			d.log.Error("dropping change that cannot be encoded", "key", e.key, "err", err)
			d.failed(e.item.Change, "encode")
			d.markIncomplete(e.item.Change)
			d.snapshots.done(e.item.Change)
			continue
		}
		if e.conflated > 0 || e.incomplete > 0 {
			// The event is shared with other sinks; these belong to this one.
			c := ev.Clone()
			if e.conflated > 0 {
				c.SetExtension(encoding.ExtConflated, strconv.Itoa(e.conflated))
			}
			if e.incomplete > 0 {
				c.SetExtension(encoding.ExtIncomplete, strconv.Itoa(e.incomplete))
			}
			ev = &c
		}
		kept = append(kept, e)
		events = append(events, ev)
	}
	batch = kept
	if len(events) == 0 {
		return events, 0
	}
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := d.sink.Write(d.work, events)
		d.mPublish.Observe(time.Since(start).Seconds())
		if err == nil {
			d.setHealthy(true)
			l.blocked(false)
			now := time.Now()
			for _, e := range batch {
				d.published(e.item.Change, now)
			}
			return events, len(batch)
		}
		if d.work.Err() != nil {
			return events, len(batch)
		}
		if errors.Is(err, ErrPermanent) {
			// The broker answered: whatever it refused, the resource's
			// writes are not failing as a whole.
			l.blocked(false)
			if len(events) > 1 {
				// Find the culprit: write one at a time, in order, so only
				// the refused events are dropped.
				for i, ev := range events {
					d.deliver1(l, ev, batch[i].item.Change)
				}
				return events, len(batch)
			}
			d.refused(events[0], batch[0].item.Change, err)
			return events, len(batch)
		}
		d.setHealthy(false)
		l.blocked(true)
		metrics.WriteRetries.WithLabelValues(d.name).Inc()
		if attempt == 1 || attempt%10 == 0 {
			// The resource is named: a missing topic or stream fails only
			// its own lane, and the log should say which.
			l.log.Warn("sink write failed; retrying", "attempt", attempt, "events", len(events), "err", err)
		}
		if !b.wait(d.work) {
			return events, len(batch)
		}
	}
}

func (d *Dispatcher) deliver1(l *lane, ev *event.Event, c *informer.Change) {
	one := [1]*event.Event{ev}
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		err := d.sink.Write(d.work, one[:])
		switch {
		case err == nil:
			d.setHealthy(true)
			l.blocked(false)
			d.published(c, time.Now())
			return
		case d.work.Err() != nil:
			return
		case errors.Is(err, ErrPermanent):
			l.blocked(false)
			d.refused(ev, c, err)
			return
		}
		d.setHealthy(false)
		metrics.WriteRetries.WithLabelValues(d.name).Inc()
		if !b.wait(d.work) {
			return
		}
	}
}

func (d *Dispatcher) refused(ev *event.Event, c *informer.Change, err error) {
	d.log.Error("sink refused event permanently; dropping it", "id", ev.ID(),
		"partitionkey", ev.Extensions()[encoding.ExtPartitionKey], "err", err)
	d.failed(c, "refused")
	d.markIncomplete(c)
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
	d := b.next + rand.N(b.next/2+1)
	b.next = min(b.next*2, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
