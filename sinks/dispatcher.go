package sinks

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/metrics"
)

// ExtConflated is set on an event that stands for several changes of its
// object folded together while the buffer was full; its value is how many
// earlier changes were folded in.
const ExtConflated = "conflated"

// Item is one Change on its way to every sink that receives it. The
// CloudEvent is built once, by the first dispatcher that needs it, and shared.
type Item struct {
	Change *informer.Change

	// size is the object's byte size when the item was read back from a
	// spool, where Change.Raw is gone.
	size int64
	// conflated is how many earlier changes were folded into it before it
	// was spooled.
	conflated int

	once sync.Once
	ev   *event.Event
	err  error
}

// NewItem wraps c for the dispatchers.
func NewItem(c *informer.Change) *Item { return &Item{Change: c} }

// Event returns the CloudEvent of the item, building it on first use.
func (it *Item) Event() (*event.Event, error) {
	it.once.Do(func() { it.ev, it.err = encoding.Event(it.Change) })
	return it.ev, it.err
}

// bytes is the item's size as counted against Options.BufferBytes.
func (it *Item) bytes() int64 {
	if it.size > 0 {
		return it.size
	}
	return it.Change.Size()
}

// Options tune a Dispatcher. Zero values take the documented defaults.
type Options struct {
	// Shards is the number of per-key FIFOs worked in parallel (default 16).
	Shards int
	// BufferEvents is how many events may wait in memory before the
	// overflow policy applies (default 10000): they go to the spool, or,
	// without one, new changes are folded into queued ones of the same
	// object.
	BufferEvents int
	// BufferBytes is the same limit in bytes of object data, counted for
	// changes whose size is known without encoding (Change.Size); 0 means
	// no byte limit.
	BufferBytes int64
	// Lanes is how many resources the sink receives (default 1). Each
	// resource has a lane of its own, so one whose destination refuses
	// writes waits alone; the buffer limits above are split between them.
	Lanes int
	// BatchSize is the most events handed to one Sink.Write (default 100).
	BatchSize int
	// RetryInitial and RetryMax bound the exponential backoff between
	// attempts (defaults 100ms and 5s). Jitter is added on top. The cap is
	// short so a broker that comes back is used again within seconds.
	RetryInitial, RetryMax time.Duration
	Logger                 *slog.Logger
}

func (o *Options) defaults() {
	if o.Shards <= 0 {
		o.Shards = 16
	}
	if o.BufferEvents <= 0 {
		o.BufferEvents = 10000
	}
	if o.Lanes <= 0 {
		o.Lanes = 1
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Dispatcher delivers Items to one Sink. Each resource has a lane of its own
// (lane.go), so a resource whose topic is missing waits without holding the
// others back. Within a lane, items with the same key go to the same shard
// and are written strictly in order, each retried until the sink
// acknowledges it; different shards run in parallel. Enqueue never blocks.
// When the memory buffer is full, events go to the disk spool if the
// dispatcher has one (UseSpool), in order, and come back once there is room;
// without a spool, or once the spool is full, a new change of an object that
// is still queued replaces the queued one (conflation), so memory stays at
// about one entry per object however long the broker is away.
type Dispatcher struct {
	name string
	sink Sink
	opt  Options
	log  *slog.Logger

	lanesMu sync.RWMutex
	lanes   map[string]*lane // by resource key prefix
	started bool
	spool   *SpoolOptions
	// spoolBytes bounds the spools of all lanes together.
	spoolBytes  atomic.Int64
	spoolEvents atomic.Int64

	mSpoolBytes, mSpoolEvents, mSpoolFull prometheus.Gauge
	mSpoolWritten                         prometheus.Counter

	// queued and queuedBytes are the totals over the lanes.
	queued      atomic.Int64
	queuedBytes atomic.Int64

	// work is cancelled only when draining runs out of time; SIGTERM alone
	// lets in-flight writes finish.
	work       context.Context
	cancelWork context.CancelFunc
	connected  chan struct{}
	// wg counts the shard workers, which Close drains. connecting counts
	// the connect loop apart from them: with nothing queued there is
	// nothing to wait for, whether or not the broker ever answered.
	wg         sync.WaitGroup
	connecting sync.WaitGroup
	closeOnce  sync.Once

	// Health (health.go): writesOK follows Connect and Write outcomes,
	// linkDown what a ConnectionNotifier sink reports.
	everConnected, writesOK, linkDown atomic.Bool
	healthMu                          sync.Mutex

	// Per-sink children of the metric vectors, looked up once rather than
	// per event.
	mPublished, mConflated sync.Map // labels -> prometheus.Counter
	mBuffer, mBufferBytes  prometheus.Gauge
	mPublish, mLag         prometheus.Observer

	snapshots snapshotsInFlight
	// incomplete counts, per snapshot id, the records that could not be
	// delivered, for the snapshot's completed marker.
	incompleteMu sync.Mutex
	incomplete   map[string]int
}

// NewDispatcher returns a dispatcher for sink. Call Start before Enqueue has
// any effect on the broker, and Close to drain.
func NewDispatcher(name string, sink Sink, opt Options) *Dispatcher {
	opt.defaults()
	d := &Dispatcher{
		name:      name,
		sink:      sink,
		opt:       opt,
		log:       opt.Logger.With("sink", name),
		connected: make(chan struct{}),
	}
	d.mBuffer = metrics.BufferEvents.WithLabelValues(name)
	d.mBufferBytes = metrics.BufferBytes.WithLabelValues(name)
	d.mPublish = metrics.PublishDuration.WithLabelValues(name)
	d.mLag = metrics.EventLag.WithLabelValues(name)
	d.work, d.cancelWork = context.WithCancel(context.Background())
	d.lanes = map[string]*lane{}
	metrics.SinkHealthy.WithLabelValues(name).Set(0)
	if cn, ok := sink.(ConnectionNotifier); ok {
		cn.NotifyConnection(d.setLinkUp)
	}
	return d
}

// Name is the sink's configured name.
func (d *Dispatcher) Name() string { return d.name }

// Queued is the number of events waiting or in flight.
func (d *Dispatcher) Queued() int { return int(d.queued.Load()) }

// Start connects the sink (retrying with backoff) and starts the shard
// workers.
func (d *Dispatcher) Start() {
	d.connecting.Add(1)
	go func() {
		defer d.connecting.Done()
		d.connect()
	}()
	d.lanesMu.Lock()
	defer d.lanesMu.Unlock()
	d.started = true
	for _, l := range d.lanes {
		l.start()
	}
}

func (d *Dispatcher) connect() {
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		err := d.sink.Connect(d.work)
		if err == nil {
			d.setHealthy(true)
			close(d.connected)
			if attempt > 1 {
				d.log.Info("sink connected", "attempts", attempt)
			}
			return
		}
		if d.work.Err() != nil {
			return
		}
		d.log.Error("sink connect failed; retrying", "attempt", attempt, "err", err)
		if !b.wait(d.work) {
			return
		}
	}
}

// Enqueue hands an item to the dispatcher. It never blocks. Snapshot markers
// are barriers in their resource's lane: they are written only after
// everything of that resource enqueued before them has been acknowledged,
// and nothing enqueued after them is written before them.
func (d *Dispatcher) Enqueue(it *Item) {
	if it.Change.IsMarker() {
		d.snapshots.add(it.Change)
	}
	d.lane(prefixOf(it.Change)).enqueue(it)
}

func prefixOf(c *informer.Change) string {
	if c.Resource == nil {
		return ""
	}
	return c.Resource.KeyPrefix
}

// Close stops accepting work and drains what is queued in memory until ctx
// ends. With a spool, nothing more is read from it, and what memory still
// holds then is spooled ahead of it, for the next start. It returns how many
// events were neither acknowledged nor spooled. The sink is closed last.
func (d *Dispatcher) Close(ctx context.Context) (undelivered int) {
	d.closeOnce.Do(func() {
		lanes := d.allLanes()
		for _, l := range lanes {
			if l.sp.disk != nil {
				l.sp.stopFeed()
				if l.sp.feedDone != nil {
					// A record the reader took from disk is in a shard
					// before anything looks at what memory holds.
					<-l.sp.feedDone
				}
			}
			for _, s := range l.shards {
				s.close()
			}
		}
		done := make(chan struct{})
		go func() { d.wg.Wait(); close(done) }()
		// With a spool there is no point waiting out the deadline for a
		// broker that is down: what memory holds is kept on disk anyway.
		var stuck <-chan time.Time
		if d.spool != nil {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			stuck = t.C
		}
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-ctx.Done():
				break wait
			case <-stuck:
				if d.onlyFailingLanesHoldEvents(lanes) {
					d.log.Info("shutdown: the sink is failing; spooling what memory holds instead of waiting for it")
					break wait
				}
			}
		}
		d.cancelWork()
		<-done
		d.connecting.Wait()
		for _, l := range lanes {
			if l.sp.disk != nil {
				undelivered += l.sp.shutdown(l, l.leftInMemory())
			} else {
				undelivered += int(l.queued.Load())
			}
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.sink.Close(closeCtx); err != nil {
			d.log.Error("closing sink", "err", err)
		}
	})
	return undelivered
}

// onlyFailingLanesHoldEvents reports whether every lane that still holds
// events is one whose writes are failing.
func (d *Dispatcher) onlyFailingLanesHoldEvents(lanes []*lane) bool {
	for _, l := range lanes {
		if l.queued.Load() > 0 && !l.failing.Load() {
			return false
		}
	}
	return true
}

// QueuedBytes is the size of the object data waiting or in flight, for
// changes whose size is known.
func (d *Dispatcher) QueuedBytes() int64 { return d.queuedBytes.Load() }

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
				c.SetExtension(ExtConflated, strconv.Itoa(e.conflated))
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

// markIncomplete remembers that a record of a snapshot was dropped, so the
// snapshot's completed marker says so: a consumer that pruned on it would
// delete the live object whose record is missing.
func (d *Dispatcher) markIncomplete(c *informer.Change) {
	if c.Op != informer.OpSynced || c.SnapshotID == "" {
		return
	}
	d.incompleteMu.Lock()
	if d.incomplete == nil {
		d.incomplete = map[string]int{}
	}
	d.incomplete[c.SnapshotID]++
	d.saveIncomplete()
	d.incompleteMu.Unlock()
}

func (d *Dispatcher) restoreIncomplete(snapshotID string, n int) {
	if n <= 0 {
		return
	}
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	if d.incomplete == nil {
		d.incomplete = map[string]int{}
	}
	d.incomplete[snapshotID] += n
	d.saveIncomplete()
}

func (d *Dispatcher) takeIncomplete(snapshotID string) int {
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	n := d.incomplete[snapshotID]
	if n > 0 {
		delete(d.incomplete, snapshotID)
		d.saveIncomplete()
	}
	return n
}

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

func (d *Dispatcher) failed(c *informer.Change, reason string) {
	l := labelsOf(c)
	metrics.EventsFailed.WithLabelValues(d.name, l.resource, string(l.op), reason).Inc()
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

// shardOf hashes key with FNV-1a; inline so the hot path does not allocate.
func shardOf(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
