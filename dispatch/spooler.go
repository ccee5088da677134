package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// minInbox is the least number of events the inbox holds on their way to
// disk before it conflates: a burst of changes should wait for the disk, not
// be folded, even with a small memory buffer.
const minInbox = 10000

// spoolReadAhead is the most object data a lane moves from its spool into
// memory ahead of the sink. It covers a Kafka sink's requests in flight on a
// few partitions at the default batch size; a lane whose bufferBytes share is
// smaller stops there first. Reading the whole bufferBytes ahead made a
// drain's heap the sum of every sink's buffer (issue 46).
const spoolReadAhead = 8 << 20

// spooler moves a dispatcher's overflow to disk and back, in order.
//
// While it is active, every new event goes behind what is spooled: first
// into the inbox (memory, so Enqueue never waits for the disk), from there
// to the disk, and from the disk back into the shards once they have room.
// Events already in the shards are older than anything spooled, so each
// key's events still reach the sink in order. The spooler turns inactive
// only when inbox and disk are both empty, under the lock Enqueue takes
// while active, so no event can slip past one that is still on its way.
type spooler struct {
	disk *spool.Spool
	log  *slog.Logger

	mu     sync.Mutex
	active atomic.Bool
	inbox  *shard
	// pending counts inbox entries (events and markers) not yet on disk.
	pending atomic.Int64
	// broken is set while the disk refuses writes: the inbox then folds
	// changes as if the spool were full, rather than growing without bound.
	broken atomic.Bool
	// lost counts events that could be written neither to the sink nor to
	// the spool at shutdown.
	lost atomic.Int64

	room  chan struct{} // the shards have room again
	freed chan struct{} // the disk has room again

	// feed stops the reader at shutdown, before the shards are drained;
	// the writer stops once the inbox is closed and empty.
	feedCtx    context.Context
	stopFeed   context.CancelFunc
	feedDone   chan struct{}
	writerDone chan struct{}

	resources sync.Map // key prefix -> *informer.Resource, for spooled items

	// proof follows the records an earlier process left (replay.go); feed
	// only.
	proof replayProof
}

// UseSpool gives the dispatcher a disk spool for its overflow (overflow:
// spool), one per resource under opt.Dir. Call it before Start. What a
// previous process left in the spool is delivered before any event
// enqueued now.
//
// The dispatcher holds opt.Dir, locked, until Close: while it does, UseSpool
// of that directory fails with spool.ErrLocked, in this process or another.
// A spool written for another cluster or sink than opt.Owner (whose Sink
// defaults to the dispatcher's name) fails with spool.ErrOwner, and nothing
// of it is read.
func (d *Dispatcher) UseSpool(opt spool.Options) error {
	if opt.Owner.Sink == "" {
		opt.Owner.Sink = d.name
	}
	lock, found, err := d.claimSpoolDir(opt)
	if err != nil {
		return err
	}
	d.spoolLock, d.spoolFound = lock, found
	d.spool = &opt
	unclean, err := d.markRunning()
	if err != nil {
		d.spool = nil
		_ = lock.Unlock()
		return fmt.Errorf("spool directory: %w", err)
	}
	d.uncleanStart = unclean
	if unclean {
		d.log.Warn("spool: the previous kubewire ended without a clean shutdown; snapshots it left unfinished go out marked incomplete", "dir", opt.Dir)
	}
	d.loadIncomplete()
	d.mSpoolBytes = metrics.SpoolBytes.WithLabelValues(d.name)
	d.mSpoolEvents = metrics.SpoolEvents.WithLabelValues(d.name)
	d.mSpoolFull = metrics.SpoolFull.WithLabelValues(d.name)
	d.mSpoolWritten = metrics.SpoolWritten.WithLabelValues(d.name)
	d.mSpoolFull.Set(0)
	entries, err := os.ReadDir(opt.Dir)
	if err != nil {
		d.spool = nil
		_ = lock.Unlock()
		return fmt.Errorf("spool directory: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		prefix := e.Name()
		if prefix == "_" {
			prefix = ""
		}
		d.lane(prefix) // opens the lane's spool, which replays what it holds
	}
	d.spoolGauges()
	return nil
}

// spoolCorrupt counts a spool data file given up as unreadable.
func (d *Dispatcher) spoolCorrupt() {
	metrics.SpoolErrors.WithLabelValues(d.name, "corrupt").Inc()
}

// claimSpoolDir locks opt.Dir and checks that its spool is opt.Owner's,
// before anything in it is read. found says the directory held a spool
// already: its owner record, or the files of an older kubewire.
func (d *Dispatcher) claimSpoolDir(opt spool.Options) (_ *spool.DirLock, found bool, err error) {
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("spool directory: %w", err)
	}
	lock, err := spool.Lock(opt.Dir)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil {
			_ = lock.Unlock()
		}
	}()
	probe, err := os.CreateTemp(opt.Dir, ".probe-")
	if err != nil {
		return nil, false, fmt.Errorf("spool directory is not writable: %w", err)
	}
	probe.Close()
	_ = os.Remove(probe.Name())
	_, noRecord := os.Stat(filepath.Join(opt.Dir, spool.OwnerFile))
	adopted, err := spool.Claim(opt.Dir, opt.Owner)
	if err != nil {
		return nil, false, err
	}
	if adopted {
		d.log.Info("spool has no owner record, as an older kubewire left it; adopting it for this cluster and sink",
			"dir", opt.Dir, "cluster", opt.Owner.Cluster)
	}
	return lock, noRecord == nil || adopted, nil
}

func (d *Dispatcher) spoolGauges() {
	d.mSpoolBytes.Set(float64(d.spoolBytes.Load()))
	d.mSpoolEvents.Set(float64(d.spoolEvents.Load()))
	full := 0.0
	if d.spool != nil && d.spoolBytes.Load() >= d.spool.MaxBytes {
		full = 1
	}
	d.mSpoolFull.Set(full)
}

// open gives the lane its spool in opt.Dir.
func (sp *spooler) open(l *lane, opt spool.Options) error {
	disk, err := spool.Open(opt, l.log, &l.d.spoolBytes)
	if err != nil {
		return err
	}
	sp.disk = disk
	sp.log = l.log
	sp.inbox = &shard{pending: map[string]*entry{}, notify: make(chan struct{}, 1)}
	sp.room = make(chan struct{}, 1)
	sp.freed = make(chan struct{}, 1)
	sp.feedCtx, sp.stopFeed = context.WithCancel(context.Background())
	if n := disk.Depth(); n > 0 {
		sp.proof = replayProof{left: n, uncertain: l.d.uncleanStart}
		l.d.oldRecords.Add(n)
		sp.active.Store(true)
		l.d.spoolEvents.Add(n)
		l.log.Info("spool holds events from an earlier run; delivering them before new ones", "events", n, "dir", opt.Dir)
	}
	return nil
}

// offer takes it for the spool if the spool is active, or if the memory
// buffer is full and the spool becomes active now. It reports whether it
// took it.
func (sp *spooler) offer(l *lane, it *Item) bool {
	if !sp.active.Load() && !l.full() {
		return false
	}
	d := l.d
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.active.Load() {
		if !l.full() {
			return false
		}
		sp.active.Store(true)
		l.log.Info("spooling events to disk in order: the buffer is full or the sink is failing", "bufferEvents", l.maxEvents,
			"queued", l.queued.Load(), "failing", l.failing.Load(), "spoolDir", sp.disk.Dir())
	}
	if it.Change.IsMarker() {
		sp.inbox.pushBarrier(&barrier{item: it})
		sp.pending.Add(1)
		d.spoolEvents.Add(1)
		return true
	}
	// The inbox is bounded too: a disk that fails, or one far slower than
	// the changes, conflates rather than filling memory.
	full := sp.disk.Full() || sp.broken.Load() || sp.pending.Load() >= int64(max(d.opt.BufferEvents, minInbox))
	if appended, _ := sp.inbox.push(it, full); appended {
		sp.pending.Add(1)
		d.spoolEvents.Add(1)
	} else {
		d.conflated(it.Change)
	}
	if full {
		d.mSpoolFull.Set(1)
	}
	return true
}

func (sp *spooler) start(l *lane) {
	sp.feedDone = make(chan struct{})
	sp.writerDone = make(chan struct{})
	go func() {
		defer close(sp.writerDone)
		sp.write(l)
	}()
	go func() {
		defer close(sp.feedDone)
		sp.feed(l)
	}()
}

// waitFor waits for a signal on ch, but no longer than recheck, after which
// the caller looks again for what ch signals. It reports false if ctx ended
// first.
func waitFor(ctx context.Context, ch <-chan struct{}, recheck time.Duration) bool {
	t := time.NewTimer(recheck)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// write moves inbox entries to disk, in order, while the disk has room.
func (sp *spooler) write(l *lane) {
	d := l.d
	buf := make([]*entry, 0, 256)
	var rec []byte
	closing := func() bool { return sp.feedCtx.Err() != nil }
	for {
		// At shutdown the reader has stopped, so waiting for room would
		// wait forever; the bound is overshot by what the inbox holds.
		for sp.disk.Full() && !closing() {
			d.mSpoolFull.Set(1)
			// The bound is shared by the sink's lanes and another lane's
			// reader may free the room, so look again now and then.
			waitFor(sp.feedCtx, sp.freed, 200*time.Millisecond)
		}
		var b *barrier
		// Not distinct: the disk keeps the order of a key's versions,
		// and they reach a Write one at a time once read back.
		buf, b = sp.inbox.take(context.Background(), buf[:0], cap(buf), false)
		if b != nil {
			buf = append(buf, &entry{item: b.item, key: b.item.Change.Key})
		}
		if len(buf) == 0 {
			return // closed and empty
		}
		for i, e := range buf {
			if sp.disk.Full() && !closing() {
				// Leave the rest in the inbox, where later changes of the
				// same objects can still be folded into them.
				sp.inbox.unshift(buf[i:])
				break
			}
			ev, err := e.item.Event()
			if err == nil {
				rec = appendSpoolRecord(rec[:0], e, ev)
			}
			if err != nil {
				d.log.Error("dropping change that cannot be encoded", "key", e.key, "err", err)
				d.drop(e, "encode")
				d.snapshots.done(e.item.Change)
				sp.pending.Add(-1)
				d.spoolEvents.Add(-1)
				continue
			}
			if !sp.put(d, rec, closing) {
				d.lose(e, "spool")
				sp.lost.Add(1)
				sp.pending.Add(-1)
				d.spoolEvents.Add(-1)
				continue
			}
			e.spooled()
			d.mSpoolWritten.Inc()
			sp.pending.Add(-1)
		}
		d.spoolGauges()
	}
}

// put writes rec, retrying a failing disk with backoff: the events behind
// it must not overtake it. While the disk fails, the inbox conflates.
func (sp *spooler) put(d *Dispatcher, rec []byte, closing func() bool) bool {
	b := d.newBackoff()
	for attempt := 1; ; attempt++ {
		err := sp.disk.Put(rec)
		if err == nil {
			if sp.broken.Swap(false) {
				sp.log.Info("spool writes succeed again", "attempts", attempt)
			}
			return true
		}
		if closing() {
			// Shutdown must end; the event is counted as lost.
			metrics.SpoolErrors.WithLabelValues(d.name, "write").Inc()
			sp.log.Error("shutdown: cannot write to the spool; the event is lost", "dir", sp.disk.Dir(), "err", err)
			return false
		}
		sp.broken.Store(true)
		metrics.SpoolErrors.WithLabelValues(d.name, "write").Inc()
		if attempt == 1 || attempt%10 == 0 {
			sp.log.Error("cannot write to the spool; retrying, and conflating new changes meanwhile",
				"dir", sp.disk.Dir(), "attempt", attempt, "err", err)
		}
		b.wait(context.Background())
	}
}

// feed moves spooled events back into the shards as they make room, and
// turns the spooler inactive once inbox and disk are empty.
func (sp *spooler) feed(l *lane) {
	d := l.d
	for {
		for !sp.mayRead(l) {
			// Room comes with a write acknowledged, or with the sink's
			// connection back while memory is empty and nothing is being
			// written; look again now and then for the latter.
			if !waitFor(sp.feedCtx, sp.room, 250*time.Millisecond) {
				return
			}
		}
		sp.mu.Lock()
		// pending before depth: an entry leaves pending only once it is on
		// disk, so reading them in this order cannot miss one in between.
		if sp.active.Load() && sp.pending.Load() == 0 && sp.disk.Depth() == 0 {
			sp.active.Store(false)
			sp.log.Info("spool drained; events go straight to the sink again")
		}
		sp.mu.Unlock()
		// Wait for a record before taking it, then look at the gate
		// again: a record that arrives while the reader waits would
		// otherwise go straight to memory, past the gate.
		if sp.disk.Wait(sp.feedCtx) != nil {
			return
		}
		if !sp.mayRead(l) {
			continue
		}
		raw, err := sp.disk.Next(sp.feedCtx)
		if err != nil {
			return
		}
		select {
		case sp.freed <- struct{}{}:
		default:
		}
		d.spoolEvents.Add(-1)
		old := sp.proof.left > 0
		r, err := parseSpoolRecord(raw)
		if err != nil {
			// Cannot happen short of disk corruption; say so loudly.
			metrics.SpoolErrors.WithLabelValues(d.name, "read").Inc()
			sp.log.Error("skipping a spool record that cannot be read", "bytes", len(raw), "err", err)
			if old {
				sp.proof.left--
				d.oldDone()
			}
			continue
		}
		it := r.item(sp.resource)
		if sp.proof.skipped(d, it.Change, r.event) {
			if sp.proof.left == 0 {
				sp.log.Info("spool: skipped the records of an earlier run that the resumed watch delivers again, in order", "records", sp.proof.skips)
			}
			d.oldDone()
			d.spoolGauges()
			continue
		}
		it.old = old
		sp.proof.check(d, it.Change, r.event)
		l.enqueueMemory(it, false)
		d.spoolGauges()
	}
}

// mayRead reports whether a record may leave the disk for memory now. Not
// while memory is full or the sink is failing, not before the sink has
// connected, and, until the broker has acknowledged a write since this
// start, one event at a time: a restart into an outage must not move the
// spool into memory, where the next kill loses it.
//
// Nor while the lane holds spoolReadAhead bytes: a drain reads faster than
// any broker takes, so what memory holds beyond the sink's next writes only
// waits there.
func (sp *spooler) mayRead(l *lane) bool {
	d := l.d
	return !l.full() && l.queuedBytes.Load() < spoolReadAhead && d.everConnected.Load() && (d.acked.Load() || l.queued.Load() == 0)
}

// resource returns the stand-in Resource of a key prefix: spooled items
// need only its prefix, for their metric labels.
func (sp *spooler) resource(prefix string) *informer.Resource {
	if r, ok := sp.resources.Load(prefix); ok {
		return r.(*informer.Resource)
	}
	r, _ := sp.resources.LoadOrStore(prefix, &informer.Resource{KeyPrefix: prefix})
	return r.(*informer.Resource)
}

// roomMade tells the reader that the shards have shrunk.
func (sp *spooler) roomMade() {
	select {
	case sp.room <- struct{}{}:
	default:
	}
}

// shutdown stops the reader, writes the inbox to disk, and then writes left,
// the entries still in memory (older than anything on disk), to a segment
// read first on the next start. It returns how many entries it could not
// keep.
func (sp *spooler) shutdown(l *lane, left []*entry) (lost int) {
	d := l.d
	sp.stopFeed()
	sp.inbox.close()
	if sp.feedDone != nil { // started
		<-sp.feedDone
		<-sp.writerDone
	} else {
		// Events enqueued behind a replayed spool before Start.
		sp.write(l)
	}
	lost = int(sp.lost.Load())
	var recs [][]byte
	var kept []*entry
	for _, e := range left {
		ev, err := e.item.Event()
		if err != nil {
			d.log.Error("dropping change that cannot be encoded", "key", e.key, "err", err)
			d.drop(e, "encode")
			continue
		}
		recs = append(recs, appendSpoolRecord(nil, e, ev))
		kept = append(kept, e)
	}
	start := time.Now()
	if err := sp.disk.Prepend(recs); err != nil {
		metrics.SpoolErrors.WithLabelValues(d.name, "write").Inc()
		sp.log.Error("shutdown: cannot spool the events still in memory", "events", len(recs), "err", err)
		for _, e := range kept {
			d.lose(e, "spool")
		}
		lost += len(recs)
	} else if len(recs) > 0 {
		for _, e := range kept {
			e.spooled()
		}
		sp.log.Info("shutdown: spooled the events still in memory; they are delivered first on the next start",
			"events", len(recs), "took", time.Since(start).Round(time.Millisecond))
	}
	depth := sp.disk.Depth()
	if err := sp.disk.Close(); err != nil {
		metrics.SpoolErrors.WithLabelValues(d.name, "close").Inc()
		sp.log.Error("shutdown: closing the spool", "err", err)
	}
	if depth > 0 {
		sp.log.Info("shutdown: spool kept for the next start", "events", depth, "dir", sp.disk.Dir())
	}
	return lost
}
