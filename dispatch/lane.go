package dispatch

import (
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
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
	// kubewire_resource_blocked.
	failing  atomic.Bool
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
// With a spool, a lane whose writes fail, whose sink has reported its
// connection lost, or whose sink could not connect at all, counts as full
// too: what arrives during an outage then goes to disk at once instead of
// filling memory first, so a crash during the outage loses only what was
// queued when it began.
func (l *lane) full() bool {
	return l.queued.Load() >= l.maxEvents || l.maxBytes > 0 && l.queuedBytes.Load() >= l.maxBytes ||
		l.sp.disk != nil && (l.failing.Load() || l.d.linkDown.Load() || l.d.connectFailed.Load())
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
func (l *lane) work1(s *shard) {
	d := l.d
	select {
	case <-d.connected:
	case <-d.work.Done():
		return
	}
	batch := make([]*entry, 0, d.opt.BatchSize)
	events := make([]*encoding.Event, 0, d.opt.BatchSize)
	for {
		var b *barrier
		batch, b = s.take(d.work, batch[:0], d.opt.BatchSize)
		switch {
		case b != nil:
			if !l.arrive(b) {
				s.unshift([]*entry{{barrier: b, key: b.item.Change.Key}})
				return
			}
		case len(batch) > 0:
			n, size := len(batch), int64(0)
			for _, e := range batch {
				size += e.size
			}
			var kept int
			events, kept = d.deliver(l, batch, events[:0])
			if d.work.Err() != nil {
				// Entries that could not be encoded were dropped and
				// counted; the rest go back for shutdown to keep.
				keptSize := int64(0)
				for _, e := range batch[:kept] {
					keptSize += e.size
				}
				l.done(n-kept, size-keptSize)
				s.unshift(batch[:kept])
				return
			}
			l.done(n, size)
		default:
			return
		}
	}
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
