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

// Dispatcher delivers Items to one Sink. Items with the same key go to the
// same shard and are written strictly in order, each retried until the sink
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

	shards      []*shard
	queued      atomic.Int64
	queuedBytes atomic.Int64

	// work is cancelled only when draining runs out of time; SIGTERM alone
	// lets in-flight writes finish.
	work       context.Context
	cancelWork context.CancelFunc
	connected  chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once

	healthy atomic.Bool

	// Per-sink children of the metric vectors, looked up once rather than
	// per event.
	mPublished, mConflated sync.Map // labels -> prometheus.Counter
	mBuffer, mBufferBytes  prometheus.Gauge
	mPublish, mLag         prometheus.Observer

	// barrierMu makes the insertion of a barrier into all shards atomic with
	// respect to other barriers, so every shard sees barriers in one order.
	barrierMu sync.Mutex

	snapshots snapshotsInFlight
	// incomplete counts, per snapshot id, the records that could not be
	// delivered, for the snapshot's completed marker.
	incompleteMu sync.Mutex
	incomplete   map[string]int

	sp spooler
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
	d.shards = make([]*shard, opt.Shards)
	for i := range d.shards {
		d.shards[i] = &shard{pending: map[string]*entry{}, notify: make(chan struct{}, 1)}
	}
	metrics.SinkHealthy.WithLabelValues(name).Set(0)
	return d
}

// Name is the sink's configured name.
func (d *Dispatcher) Name() string { return d.name }

// Healthy reports whether the sink is connected and its last write succeeded.
func (d *Dispatcher) Healthy() bool { return d.healthy.Load() }

// Queued is the number of events waiting or in flight.
func (d *Dispatcher) Queued() int { return int(d.queued.Load()) }

// Start connects the sink (retrying with backoff) and starts the shard
// workers.
func (d *Dispatcher) Start() {
	if d.sp.disk != nil {
		d.sp.start(d)
	}
	d.wg.Add(1 + len(d.shards))
	go func() {
		defer d.wg.Done()
		d.connect()
	}()
	for _, s := range d.shards {
		go func() {
			defer d.wg.Done()
			d.work1(s)
		}()
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
// are barriers: they are written only after everything enqueued before them
// has been acknowledged, and nothing enqueued after them is written before
// them.
func (d *Dispatcher) Enqueue(it *Item) {
	if it.Change.IsMarker() {
		d.snapshots.add(it.Change, 1)
	}
	if d.sp.disk != nil && d.sp.offer(d, it) {
		return
	}
	d.enqueueMemory(it, d.full())
}

// full reports whether the memory buffer is at its bound.
func (d *Dispatcher) full() bool {
	return d.queued.Load() >= int64(d.opt.BufferEvents) ||
		d.opt.BufferBytes > 0 && d.queuedBytes.Load() >= d.opt.BufferBytes
}

// enqueueMemory queues it in its shard, folding it into a queued change of
// the same object if full.
func (d *Dispatcher) enqueueMemory(it *Item, full bool) {
	if it.Change.IsMarker() {
		d.enqueueBarrier(it)
		return
	}
	s := d.shards[shardOf(it.Change.Key, len(d.shards))]
	appended, delta := s.push(it, full)
	if delta != 0 {
		d.queuedBytes.Add(delta)
		d.mBufferBytes.Add(float64(delta))
	}
	if appended {
		d.queued.Add(1)
		d.mBuffer.Inc()
	} else {
		d.conflated(it.Change)
	}
}

func (d *Dispatcher) enqueueBarrier(it *Item) {
	b := &barrier{item: it, done: make(chan struct{})}
	b.remaining.Store(int32(len(d.shards)))
	d.barrierMu.Lock()
	defer d.barrierMu.Unlock()
	d.queued.Add(1)
	d.mBuffer.Inc()
	for _, s := range d.shards {
		s.pushBarrier(b)
	}
}

// Close stops accepting work and drains what is queued in memory until ctx
// ends. With a spool, nothing more is read from it, and what memory still
// holds then is spooled ahead of it, for the next start. It returns how many
// events were neither acknowledged nor spooled. The sink is closed last.
func (d *Dispatcher) Close(ctx context.Context) (undelivered int) {
	d.closeOnce.Do(func() {
		if d.sp.disk != nil {
			d.sp.stopFeed()
		}
		for _, s := range d.shards {
			s.close()
		}
		done := make(chan struct{})
		go func() { d.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			d.cancelWork()
			<-done
		}
		d.cancelWork()
		if d.sp.disk != nil {
			undelivered = d.sp.shutdown(d, d.leftInMemory())
		} else {
			undelivered = int(d.queued.Load())
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.sink.Close(closeCtx); err != nil {
			d.log.Error("closing sink", "err", err)
		}
	})
	return undelivered
}

// leftInMemory merges what the shards still hold into one sequence that
// keeps each key's order and each marker's place: every shard's entries
// before the first marker, the marker once, then every shard's entries
// before the next one, and so on. Every shard holds the same markers in the
// same order, because no worker passes a marker before it is written.
func (d *Dispatcher) leftInMemory() []*entry {
	var out []*entry
	rests := make([][]*entry, len(d.shards))
	for i, s := range d.shards {
		rests[i] = s.rest()
	}
	for {
		var marker *barrier
		more := false
		for i, r := range rests {
			j := 0
			for j < len(r) && r[j].barrier == nil {
				j++
			}
			out = append(out, r[:j]...)
			if j < len(r) {
				marker = r[j].barrier
				rests[i] = r[j+1:]
				more = true
			} else {
				rests[i] = nil
			}
		}
		if !more {
			return out
		}
		out = append(out, &entry{item: marker.item, key: marker.item.Change.Key})
	}
}

// work1 is the loop of one shard: take a batch, or arrive at a barrier.
func (d *Dispatcher) work1(s *shard) {
	select {
	case <-d.connected:
	case <-d.work.Done():
		return
	}
	batch := make([]*entry, 0, d.opt.BatchSize)
	events := make([]*event.Event, 0, d.opt.BatchSize)
	for {
		var b *barrier
		batch, b = s.take(d.work, batch[:0], d.opt.BatchSize)
		switch {
		case b != nil:
			if !d.arrive(b) {
				s.unshift([]*entry{{barrier: b, key: b.item.Change.Key}})
				return
			}
		case len(batch) > 0:
			n, size := len(batch), int64(0)
			for _, e := range batch {
				size += e.size
			}
			var kept int
			events, kept = d.deliver(batch, events[:0])
			if d.work.Err() != nil {
				s.unshift(batch[:kept])
				return
			}
			d.done(n, size)
		default:
			return
		}
	}
}

func (d *Dispatcher) done(n int, size int64) {
	d.queued.Add(int64(-n))
	d.mBuffer.Sub(float64(n))
	if size != 0 {
		d.queuedBytes.Add(-size)
		d.mBufferBytes.Sub(float64(size))
	}
	if d.sp.disk != nil {
		d.sp.roomMade()
	}
}

// QueuedBytes is the size of the object data waiting or in flight, for
// changes whose size is known.
func (d *Dispatcher) QueuedBytes() int64 { return d.queuedBytes.Load() }

// arrive blocks the shard at the barrier. The last shard to arrive knows
// everything before the barrier is acknowledged everywhere, writes the marker
// and lets all shards go on.
func (d *Dispatcher) arrive(b *barrier) bool {
	if b.remaining.Add(-1) == 0 {
		c := b.item.Change
		e := &entry{item: b.item, key: c.Key}
		if c.Op == informer.OpSnapshotCompleted {
			if e.incomplete = d.takeIncomplete(c.SnapshotID); e.incomplete > 0 {
				d.log.Warn("snapshot completed with records that were not delivered; consumers must not prune on it",
					"resource", c.Key, "snapshot", c.SnapshotID, "undelivered", e.incomplete)
			}
		}
		d.deliver([]*entry{e}, nil)
		if d.work.Err() != nil {
			// Written again at the next start; the count goes with it
			// only as far as this process knew it.
			b.remaining.Add(1)
			return false
		}
		d.done(1, 0)
		d.snapshots.add(b.item.Change, -1)
		close(b.done)
		return true
	}
	select {
	case <-b.done:
		return true
	case <-d.work.Done():
		return false
	}
}

// deliver writes batch until the sink acknowledges it or the work context
// ends. It gives up on nothing except events that cannot be encoded and
// events the sink refuses permanently; both are logged and counted.
//
// It returns the events and how many entries of batch it kept: batch is
// compacted in place to those, so a caller that is cancelled can queue them
// again.
func (d *Dispatcher) deliver(batch []*entry, events []*event.Event) ([]*event.Event, int) {
	// batch is compacted in place to the entries that encoded, so that
	// batch[i] is the entry of events[i].
	kept := batch[:0]
	for _, e := range batch {
		ev, err := e.item.Event()
		if err != nil {
			d.log.Error("dropping change that cannot be encoded", "key", e.key, "err", err)
			d.failed(e.item.Change, "encode")
			d.markIncomplete(e.item.Change)
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
			if len(events) > 1 {
				// Find the culprit: write one at a time, in order, so only
				// the refused events are dropped.
				for i, ev := range events {
					d.deliver1(ev, batch[i].item.Change)
				}
				return events, len(batch)
			}
			d.refused(events[0], batch[0].item.Change, err)
			return events, len(batch)
		}
		d.setHealthy(false)
		metrics.WriteRetries.WithLabelValues(d.name).Inc()
		if attempt == 1 || attempt%10 == 0 {
			d.log.Warn("sink write failed; retrying", "attempt", attempt, "events", len(events), "err", err)
		}
		if !b.wait(d.work) {
			return events, len(batch)
		}
	}
}

func (d *Dispatcher) deliver1(ev *event.Event, c *informer.Change) {
	one := [1]*event.Event{ev}
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		err := d.sink.Write(d.work, one[:])
		switch {
		case err == nil:
			d.setHealthy(true)
			d.published(c, time.Now())
			return
		case d.work.Err() != nil:
			return
		case errors.Is(err, ErrPermanent):
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
	d.incompleteMu.Unlock()
}

func (d *Dispatcher) takeIncomplete(snapshotID string) int {
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	n := d.incomplete[snapshotID]
	delete(d.incomplete, snapshotID)
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

func (d *Dispatcher) setHealthy(ok bool) {
	if d.healthy.Swap(ok) != ok {
		v := 0.0
		if ok {
			v = 1
		}
		metrics.SinkHealthy.WithLabelValues(d.name).Set(v)
	}
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
