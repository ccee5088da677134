package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// labels are the bounded labels of an event's counters: the resource and
// the change type, never the object.
type labels struct {
	resource string
	op       informer.Op
}

func labelsOf(c *informer.Change) labels {
	l := labels{op: c.Op}
	if c.Resource != nil {
		l.resource = c.Resource.KeyPrefix
	}
	return l
}

// published counts an acknowledged event and its lag. The counter children
// are cached per (resource, type) so the hot path does not hash labels.
func (d *Dispatcher) published(c *informer.Change, now time.Time) {
	l := labelsOf(c)
	ctr, ok := d.mPublished.Load(l)
	if !ok {
		ctr, _ = d.mPublished.LoadOrStore(l, metrics.EventsPublished.WithLabelValues(d.name, l.resource, string(l.op)))
	}
	ctr.(prometheus.Counter).Inc()
	d.mLag.Observe(now.Sub(c.Observed).Seconds())
}

func (d *Dispatcher) conflated(c *informer.Change) {
	l := labelsOf(c)
	ctr, ok := d.mConflated.Load(l)
	if !ok {
		ctr, _ = d.mConflated.LoadOrStore(l, metrics.EventsConflated.WithLabelValues(d.name, l.resource, string(l.op)))
	}
	ctr.(prometheus.Counter).Inc()
}

// drop gives up on a change for good (it cannot be encoded, or the broker
// refused it): it is counted under reason, and if it is a snapshot record,
// its snapshot's completed marker will say that a record is missing, so
// that no consumer prunes on it.
//
// The entry is done for this sink: its watch stream's checkpoint may pass it.
func (d *Dispatcher) drop(e *entry, reason string) {
	d.lose(e, reason)
	d.finish(e)
}

// lose counts a change that this process could keep neither in the broker
// nor in the spool (a spool write that fails at shutdown, a change that
// arrives once the spool is closed), as drop does, but leaves it not done:
// the checkpoint saved after the drain stays before it, so the next start
// reads it again from the apiserver. A record an earlier process spooled
// stays undelivered too, so the replay is not over and the spool position
// is not saved past it.
func (d *Dispatcher) lose(e *entry, reason string) {
	c := e.item.Change
	d.failed(c, reason)
	d.markIncomplete(c)
}

// delivered counts an acknowledged entry, which is then done for this
// sink.
func (d *Dispatcher) delivered(e *entry, now time.Time) {
	d.published(e.item.Change, now)
	d.finish(e)
}

// finish records that this sink is done with the entry, for its watch
// stream's checkpoint and for the replay of an earlier process's spool.
func (d *Dispatcher) finish(e *entry) {
	e.finish()
	if e.item.old {
		d.oldDone()
	}
}

func (d *Dispatcher) failed(c *informer.Change, reason string) {
	l := labelsOf(c)
	metrics.EventsFailed.WithLabelValues(d.name, l.resource, string(l.op), reason).Inc()
}
