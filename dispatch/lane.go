package dispatch

import (
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// lane carries one resource's events to the sink: its shards, its share of
// the memory buffer and its spool. A snapshot marker is a barrier across the
// shards of its own lane only, and a lane whose writes fail (its topic is
// missing, say) fills its own share and spool while the other resources of
// the sink go on.
type lane struct {
	d      *Dispatcher
	prefix string
	log    *slog.Logger

	shards      []*shard
	queued      atomic.Int64
	queuedBytes atomic.Int64
	maxEvents   int64
	maxBytes    int64

	// barrierMu makes the insertion of a barrier into all shards atomic with
	// respect to other barriers, so every shard sees barriers in one order.
	barrierMu sync.Mutex

	sp spooler

	// failing is set while this lane's writes fail, for
	// kubewire_resource_blocked. down is set while they fail and none is
	// acknowledged: new events fail as well as held ones, so that, with a
	// spool, what arrives goes to disk (see full). One stalled partition
	// fails some keys; the lane is not down.
	failing  atomic.Bool
	down     atomic.Bool
	mBlocked prometheus.Gauge
}

// lane returns the lane of a resource, making it on first use.
func (d *Dispatcher) lane(prefix string) *lane {
	d.lanesMu.RLock()
	l := d.lanes[prefix]
	d.lanesMu.RUnlock()
	if l != nil {
		return l
	}
	d.lanesMu.Lock()
	defer d.lanesMu.Unlock()
	if l = d.lanes[prefix]; l != nil {
		return l
	}
	l = d.newLane(prefix)
	d.lanes[prefix] = l
	if d.started {
		l.start()
	}
	return l
}

// SetLanes says how many resources the sink now receives: the lanes made
// from now on take their share of the buffer limits from it. Lanes that
// exist keep theirs, so resources added while running can take the sink
// above its limits by their shares; resources found by discovery at start
// are counted before any lane exists.
func (d *Dispatcher) SetLanes(n int) {
	d.lanesMu.Lock()
	defer d.lanesMu.Unlock()
	d.opt.Lanes = max(n, 1)
}

func (d *Dispatcher) newLane(prefix string) *lane {
	l := &lane{
		d:         d,
		prefix:    prefix,
		log:       d.log.With("resource", prefix),
		maxEvents: int64(max(d.opt.BufferEvents/d.opt.Lanes, 1)),
		maxBytes:  d.opt.BufferBytes / int64(d.opt.Lanes),
		mBlocked:  metrics.ResourceBlocked.WithLabelValues(d.name, prefix),
	}
	l.mBlocked.Set(0)
	l.shards = make([]*shard, d.opt.Shards)
	for i := range l.shards {
		l.shards[i] = &shard{pending: map[string]*entry{}, notify: make(chan struct{}, 1)}
	}
	if d.spool != nil {
		dir := filepath.Join(d.spool.Dir, laneDir(prefix))
		if err := l.sp.open(l, spool.Options{Dir: dir, MaxBytes: d.spool.MaxBytes, Fsync: d.spool.Fsync, OnCorrupt: d.spoolCorrupt}); err != nil {
			// The base directory was writable at start; a sub-directory
			// that is not is a broken disk. Conflate rather than stop.
			metrics.SpoolErrors.WithLabelValues(d.name, "open").Inc()
			l.log.Error("cannot open the spool of this resource; its overflow will be conflated", "dir", dir, "err", err)
		} else if l.sp.disk.Cut() {
			d.spoolCut.Store(true)
		}
	}
	return l
}

// laneDir is the spool directory of a resource: its key prefix, which is a
// resource and group name and so a safe file name.
func laneDir(prefix string) string {
	if prefix == "" {
		return "_"
	}
	return prefix
}

func (d *Dispatcher) allLanes() []*lane {
	d.lanesMu.RLock()
	defer d.lanesMu.RUnlock()
	ls := make([]*lane, 0, len(d.lanes))
	for _, l := range d.lanes {
		ls = append(ls, l)
	}
	return ls
}

func (l *lane) start() {
	if l.sp.disk != nil {
		l.sp.start(l)
	}
	l.d.wg.Add(len(l.shards))
	for _, s := range l.shards {
		go func() {
			defer l.d.wg.Done()
			l.work1(s)
		}()
	}
}

func (l *lane) enqueue(it *Item) {
	if l.sp.disk != nil {
		if !l.sp.offer(l, it) {
			// offer found room in memory; never fold while the spool
			// could take the overflow.
			l.enqueueMemory(it, false)
		}
		return
	}
	l.enqueueMemory(it, l.full())
}

// full reports whether the lane's share of the memory buffer is used up.
// With a spool, a lane whose writes fail (all of them: see down), whose sink has reported its
// connection lost, or whose sink could not connect at all, counts as full
// too: what arrives during an outage then goes to disk at once instead of
// filling memory first, so a crash during the outage loses only what was
// queued when it began.
func (l *lane) full() bool {
	return l.queued.Load() >= l.maxEvents || l.maxBytes > 0 && l.queuedBytes.Load() >= l.maxBytes ||
		l.sp.disk != nil && (l.down.Load() || l.d.linkDown.Load() || l.d.connectFailed.Load())
}

// enqueueMemory queues it in its shard, folding it into a queued change of
// the same object if full.
func (l *lane) enqueueMemory(it *Item, full bool) {
	if it.Change.IsMarker() {
		l.enqueueBarrier(it)
		return
	}
	d := l.d
	s := l.shards[shardOf(it.Change.Key, len(l.shards))]
	appended, delta := s.push(it, full)
	if delta != 0 {
		l.queuedBytes.Add(delta)
		d.queuedBytes.Add(delta)
		d.mBufferBytes.Add(float64(delta))
	}
	if appended {
		l.queued.Add(1)
		d.queued.Add(1)
		d.mBuffer.Inc()
	} else {
		d.conflated(it.Change)
	}
}

func (l *lane) enqueueBarrier(it *Item) {
	b := &barrier{item: it, done: make(chan struct{})}
	b.remaining.Store(int32(len(l.shards)))
	l.barrierMu.Lock()
	defer l.barrierMu.Unlock()
	l.queued.Add(1)
	l.d.queued.Add(1)
	l.d.mBuffer.Inc()
	for _, s := range l.shards {
		s.pushBarrier(b)
	}
}

func (l *lane) done(n int, size int64) {
	d := l.d
	l.queued.Add(int64(-n))
	d.queued.Add(int64(-n))
	d.mBuffer.Sub(float64(n))
	if size != 0 {
		l.queuedBytes.Add(-size)
		d.queuedBytes.Add(-size)
		d.mBufferBytes.Sub(float64(size))
	}
	if l.sp.disk != nil {
		l.sp.roomMade()
	}
}

// blocked records whether this lane's writes are failing.
func (l *lane) blocked(failing bool) {
	if l.failing.Swap(failing) == failing {
		return
	}
	if failing {
		l.mBlocked.Set(1)
	} else {
		l.mBlocked.Set(0)
		l.log.Info("writes of this resource succeed again")
	}
}

// leftInMemory merges what the shards still hold into one sequence that
// keeps each key's order and each marker's place: every shard's entries
// before the first marker, the marker once, then every shard's entries
// before the next one, and so on. Every shard holds the same markers in the
// same order, because no worker passes a marker before it is written.
func (l *lane) leftInMemory() []*entry {
	var out []*entry
	rests := make([][]*entry, len(l.shards))
	for i, s := range l.shards {
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
				if marker != nil && r[j].barrier != marker {
					// Cannot happen (see arrive). If it did, both markers
					// are kept rather than one dropped, but this shard's
					// entries may end up on the wrong side of one, which
					// could make consumers prune live objects: say so.
					l.log.Error("shutdown: shards disagree on the next snapshot marker; keeping both, possibly out of place")
					out = append(out, &entry{item: marker.item, key: marker.item.Change.Key})
				}
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
// Events that fail are held (held.go) and written again after a backoff,
// the later events of their keys staying queued until then; the shard's
// other keys go on meanwhile, in the same Writes as the retries when these
// are due.
func (l *lane) work1(s *shard) {
	d := l.d
	select {
	case <-d.connected:
	case <-d.work.Done():
		return
	}
	h := newHeld()
	batch := make([]*entry, 0, d.opt.BatchSize)
	fresh := make([]*entry, 0, d.opt.BatchSize)
	events := make([]*encoding.Event, 0, d.opt.BatchSize)
	var timer *time.Timer
	arm := func(wait time.Duration) <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		return timer.C
	}
	for {
		batch = batch[:0]
		if len(h.es) == 0 {
			h.freshOK()
		}
		var until <-chan time.Time
		if len(h.es) > 0 {
			now := time.Now()
			switch wait := h.due.Sub(now); {
			case wait <= 0:
				n := d.opt.BatchSize
				if h.dead && n > 1 {
					// Room for the new event that goes with the retry.
					n--
				}
				batch = h.front(batch, n)
				until = expired
			case h.dead:
				// New events wait for the retry too while the sink takes
				// none: they stay queued, where a full buffer folds them.
				if !tick.Sleep(d.work, wait) {
					s.unshift(h.all())
					return
				}
				continue
			default:
				until = arm(wait)
			}
		}
		retried := len(batch)
		var b *barrier
		fresh = fresh[:0]
		room := d.opt.BatchSize - retried
		if h.dead {
			// One new event goes with the retry: if the sink takes it,
			// only some keys fail, and the others go on (freshOK).
			room = min(room, 1)
		}
		if room > 0 {
			var skip func(string) bool
			if len(h.keys) > 0 {
				// Not len(h.es): the keys front took stay held.
				skip = h.holds
			}
			fresh, b = s.takeUntil(d.work, fresh, room, true, until, skip)
		}
		if b != nil {
			// Everything before the barrier must be acknowledged first.
			left := l.deliverHeld(append(batch, h.all()...))
			if d.work.Err() != nil || !l.arrive(b) {
				s.unshift(append(left, &entry{barrier: b, key: b.item.Change.Key}))
				return
			}
			continue
		}
		// Entries of held keys stay queued (skip), the retried ones' keys
		// included until attempt settles them: like take's distinct, so
		// that a Write holds one event of each key.
		batch = append(batch, fresh...)
		clear(fresh)
		if len(batch) == 0 {
			switch {
			case d.work.Err() != nil:
				s.unshift(h.all())
				return
			case len(h.es) == 0 && s.isClosed():
				return
			case s.isClosed():
				// Draining: nothing will wake the shard but the retry.
				if !tick.Sleep(d.work, time.Until(h.due)) {
					s.unshift(h.all())
					return
				}
			}
			continue
		}
		events = l.attempt(h, batch, retried, events[:0])
		if d.work.Err() != nil {
			s.unshift(h.all())
			return
		}
	}
}

// attempt writes batch once; its first retried entries are the head of h
// that was due. What fails is held, the retried entries at the head again.
func (l *lane) attempt(h *held, batch []*entry, retried int, events []*encoding.Event) []*encoding.Event {
	d := l.d
	n, size := len(batch), int64(0)
	for i, e := range batch {
		size += e.size
		// For settle's compacted result: which failed entries were held.
		e.retried = i < retried
	}
	// Copied, since encode and settle compact batch in place.
	var tried []*entry
	if retried > 0 {
		tried = append(tried, batch[:retried]...)
	}
	fresh := n > retried
	batch, events = d.encode(batch, events)
	if len(batch) == 0 {
		l.done(n, size)
		return events
	}
	start := time.Now()
	err := d.sink.Write(d.work, events)
	d.mPublish.Observe(time.Since(start).Seconds())
	now := time.Now()
	rest, o := batch[:0], outcome{acked: len(batch)}
	if err == nil {
		for _, e := range batch {
			d.delivered(e, now)
		}
	} else {
		rest, _, o = d.settle(l, batch, events, err)
	}
	restSize := int64(0)
	var back []*entry
	freshFailed := 0
	for _, e := range rest {
		restSize += e.size
		if e.retried {
			back = append(back, e)
		} else {
			freshFailed++
			h.add(e)
		}
	}
	h.settle(tried, back)
	clear(rest)
	l.done(n-len(rest), size-restSize)
	if o.acked > 0 {
		d.noteAcked()
		l.down.Store(false)
		if fresh {
			h.freshOK()
		}
	}
	if len(rest) == 0 {
		if retried > 0 {
			h.retriedOK(now)
		}
		if len(h.es) == 0 {
			// The broker answered every event: whatever it refused, the
			// resource's writes are not failing.
			if o.acked > 0 {
				d.setHealthy(true)
			}
			l.blocked(false)
		}
		return events
	}
	if d.work.Err() != nil {
		return events
	}
	if o.acked == 0 && freshFailed > o.stalled {
		// New events fail as well as held ones: the resource's writes
		// fail, not just some of its keys. New events that failed only
		// because their part of the sink stalled do not count: the
		// sink's other parts may take the next keys, and waiting out the
		// retry's backoff would hold those back with the stalled ones.
		l.down.Store(true)
		h.dead = true
	}
	d.setHealthy(false)
	l.blocked(true)
	metrics.WriteRetries.WithLabelValues(d.name).Inc()
	h.failed(d, len(back) > 0, now)
	if h.failures == 1 || h.failures%10 == 0 {
		// The resource is named: a missing topic or stream fails only
		// its own lane, and the log should say which.
		l.log.Warn("sink write failed; retrying", "attempt", h.failures, "events", len(h.es), "acknowledged", o.acked, "err", err)
	}
	return events
}

// deliverHeld writes es until each is acknowledged or refused, or the
// work context ends; it returns what is left then, in order.
func (l *lane) deliverHeld(es []*entry) []*entry {
	if len(es) == 0 {
		return nil
	}
	n, size := len(es), int64(0)
	for _, e := range es {
		size += e.size
	}
	_, kept := l.d.deliver(l, es, nil)
	keptSize := int64(0)
	for _, e := range es[:kept] {
		keptSize += e.size
	}
	l.done(n-kept, size-keptSize)
	return es[:kept]
}

// arrive blocks the shard at the barrier. The last shard to arrive knows
// everything of the lane before the barrier is acknowledged, writes the
// marker and lets all shards go on.
func (l *lane) arrive(b *barrier) bool {
	d := l.d
	if b.remaining.Add(-1) == 0 {
		c := b.item.Change
		e := &entry{item: b.item, key: c.Key}
		if c.Op == informer.OpSnapshotCompleted {
			if e.incomplete = d.takeIncomplete(c.SnapshotID); e.incomplete > 0 {
				d.log.Warn("snapshot completed with records that were not delivered; consumers must not prune on it",
					"resource", c.Key, "snapshot", c.SnapshotID, "undelivered", e.incomplete)
			}
		}
		d.deliver(l, []*entry{e}, nil)
		if d.work.Err() != nil {
			// Written again at the next start, with its count: put it
			// back where shutdown keeps it.
			b.remaining.Add(1)
			d.restoreIncomplete(c.SnapshotID, e.incomplete)
			return false
		}
		l.done(1, 0)
		d.snapshots.done(c)
		close(b.done)
		return true
	}
	select {
	case <-b.done:
		return true
	case <-d.work.Done():
		// Both may be ready: a marker that was written must not be
		// queued again behind events that followed it.
		select {
		case <-b.done:
			return true
		default:
			return false
		}
	}
}
