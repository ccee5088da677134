// Package dispatch is kubewire's delivery engine: one Dispatcher per sink
// owns per-key order, retries, buffering, the disk spool and snapshot
// barriers, so that adapters only talk to their broker.
package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/sinks"
)

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
	// A Write holds at most one event of each key, so the later versions
	// of a key wait for the next one (shard.take says why).
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
// and are written strictly in order, one per Write, each retried until the
// sink acknowledges it; different shards run in parallel. Enqueue never blocks.
// When the memory buffer is full, events go to the disk spool if the
// dispatcher has one (UseSpool), in order, and come back once there is room;
// without a spool, or once the spool is full, a new change of an object that
// is still queued replaces the queued one (conflation), so memory stays at
// about one entry per object however long the broker is away.
type Dispatcher struct {
	name string
	sink sinks.Sink
	opt  Options
	log  *slog.Logger

	lanesMu sync.RWMutex
	lanes   map[string]*lane // by resource key prefix
	started bool
	spool   *spool.Options
	// spoolLock keeps other processes out of spool.Dir until Close.
	spoolLock *spool.DirLock
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
	// gate orders Enqueue against the moment Close takes what memory
	// holds: after it (shut), arrivals are lost (late counts them).
	gate sync.RWMutex
	shut bool
	late atomic.Int64

	// Health (health.go): writesOK follows Connect and Write outcomes,
	// linkDown what a ConnectionNotifier sink reports.
	everConnected, writesOK, linkDown atomic.Bool
	healthMu                          sync.Mutex
	// connectFailed is set while the last Connect attempt failed and none
	// has succeeded: a sink that never connected is as failing as one
	// whose writes fail. acked is set once the sink acknowledged a write
	// since this start; until then a spool is not read back into memory
	// beyond one event to try the broker with (see spooler.feed).
	connectFailed, acked atomic.Bool
	// oldRecords counts the records an earlier process spooled that are
	// not yet delivered; replayed is closed when it reaches 0 (replay.go).
	oldRecords   atomic.Int64
	replayed     chan struct{}
	replayedOnce sync.Once
	// replaySkip, if set, says which records an earlier process spooled
	// the resumed watch delivers again (SetReplaySkip).
	replaySkip func(c *informer.Change, ev *encoding.Event) bool
	// uncleanStart: the process that wrote the spool ended without Close
	// (replay.go).
	uncleanStart bool
	// spoolFound: UseSpool found a spool in its directory; spoolCut: a
	// lane's spool cut off a record that was not whole (SpoolAsLeft).
	spoolFound bool
	spoolCut   atomic.Bool

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
	// loadedIncomplete is incomplete as an earlier run left it: records
	// in no spool now, which a replayed marker's check must not count
	// again (replay.go). Read-only after UseSpool.
	loadedIncomplete map[string]int
}

// NewDispatcher returns a dispatcher for sink. Call Start before Enqueue has
// any effect on the broker, and Close to drain.
func NewDispatcher(name string, sink sinks.Sink, opt Options) *Dispatcher {
	opt.defaults()
	d := &Dispatcher{
		name:      name,
		sink:      sink,
		opt:       opt,
		log:       opt.Logger.With("sink", name),
		connected: make(chan struct{}),
		replayed:  make(chan struct{}),
	}
	d.mBuffer = metrics.BufferEvents.WithLabelValues(name)
	d.mBufferBytes = metrics.BufferBytes.WithLabelValues(name)
	d.mPublish = metrics.PublishDuration.WithLabelValues(name)
	d.mLag = metrics.EventLag.WithLabelValues(name)
	d.work, d.cancelWork = context.WithCancel(context.Background())
	d.lanes = map[string]*lane{}
	metrics.SinkHealthy.WithLabelValues(name).Set(0)
	if cn, ok := sink.(sinks.ConnectionNotifier); ok {
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
	if d.oldRecords.Load() == 0 {
		d.replayedOnce.Do(func() { close(d.replayed) })
	}
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
		d.connectFailed.Store(err != nil)
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
//
// Once Close has taken what memory holds for the spool, nothing can keep a
// change any more: one that arrives then is counted as lost (reason
// "closed") and left not done, so the checkpoint stays before it.
func (d *Dispatcher) Enqueue(it *Item) {
	d.gate.RLock()
	defer d.gate.RUnlock()
	if d.shut {
		d.lateArrival(it)
		return
	}
	if it.Change.IsMarker() {
		d.snapshots.add(it.Change)
	}
	d.lane(prefixOf(it.Change)).enqueue(it)
}

// lateArrival counts a change enqueued after Close shut the gate; the first
// is logged.
func (d *Dispatcher) lateArrival(it *Item) {
	if d.late.Add(1) == 1 {
		d.log.Error("shutdown: a change arrived after the sink's spool closed; it is lost here, and the checkpoint stays before it so that the next start reads it again",
			"key", it.Change.Key)
	}
	d.lose(&entry{item: it, key: it.Change.Key}, "closed")
}

// Close stops accepting work and drains what is queued in memory until ctx
// ends. With a spool, nothing more is read from it, and what memory still
// holds then is spooled ahead of it, for the next start. It returns how many
// events were neither acknowledged nor spooled. The sink is closed last.
func (d *Dispatcher) Close(ctx context.Context) (undelivered int) {
	d.closeOnce.Do(func() {
		lanes := d.allLanes()
		for _, l := range lanes {
			l.stopReading()
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
		// From here on what memory holds is final: whatever arrives
		// later would sit in a closed queue, or open a spool no shutdown
		// closes.
		d.gate.Lock()
		d.shut = true
		d.gate.Unlock()
		if all := d.allLanes(); len(all) != len(lanes) {
			// Lanes opened during the drain: stop them as the others
			// were, so that their spools are closed too.
			for _, l := range all {
				l.stopReading()
			}
			d.wg.Wait()
			lanes = all
		}
		for _, l := range lanes {
			if l.sp.disk != nil {
				undelivered += l.sp.shutdown(l, l.leftInMemory())
			} else {
				undelivered += int(l.queued.Load())
			}
		}
		d.markClean()
		if err := d.spoolLock.Unlock(); err != nil {
			d.log.Error("shutdown: releasing the spool directory", "err", err)
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.sink.Close(closeCtx); err != nil {
			d.log.Error("closing sink", "err", err)
		}
	})
	return undelivered
}

// stopReading stops the lane's spool reader and closes its shards, whose
// workers then deliver what they hold and stop. It may be called again.
func (l *lane) stopReading() {
	if l.sp.disk != nil {
		l.sp.stopFeed()
		if l.sp.feedDone != nil {
			// A record the reader took from disk is in a shard before
			// anything looks at what memory holds.
			<-l.sp.feedDone
		}
	}
	for _, s := range l.shards {
		s.close()
	}
}

// onlyFailingLanesHoldEvents reports whether every lane that still holds
// events is one whose writes are failing.
func (d *Dispatcher) onlyFailingLanesHoldEvents(lanes []*lane) bool {
	for _, l := range lanes {
		if l.queued.Load() > 0 && !l.failing.Load() && !d.connectFailed.Load() {
			return false
		}
	}
	return true
}

// QueuedBytes is the size of the object data waiting or in flight, for
// changes whose size is known.
func (d *Dispatcher) QueuedBytes() int64 { return d.queuedBytes.Load() }
