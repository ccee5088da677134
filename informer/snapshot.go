package informer

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// snapshotEvery takes periodic snapshots until ctx ends.
func (w *Watcher) snapshotEvery(ctx context.Context, every time.Duration) {
	deferred := false
	tick.Every(ctx, every, func() { deferred = w.periodicSnapshot(deferred) })
}

// periodicSnapshot takes a snapshot unless the Output still holds the
// previous one, and reports whether it deferred. wasDeferred only keeps the
// log to one info line per stretch of deferrals.
func (w *Watcher) periodicSnapshot(wasDeferred bool) bool {
	if st, ok := w.opt.Out.(SnapshotTracker); ok && st.SnapshotPending(w.res.KeyPrefix) {
		metrics.SnapshotsDeferred.WithLabelValues(w.name).Inc()
		msg := "periodic snapshot deferred: the previous one is not yet written to every sink"
		if wasDeferred {
			w.log.Debug(msg)
		} else {
			w.log.Info(msg)
		}
		return true
	}
	w.Snapshot()
	return false
}

// Snapshot emits every object as a synced record between a started and a
// completed marker. Each record is the state the handler last saw, read at
// the moment it is enqueued: never older than a change already enqueued for
// its key, never newer than one still queued in client-go (see lastSeen).
func (w *Watcher) Snapshot() {
	id := newSnapshotID()
	start := time.Now()
	w.marker(OpSnapshotStarted, id, 0)
	w.emitMu.Lock()
	names := make([]objectName, 0, len(w.seen))
	for name := range w.seen {
		names = append(names, name)
	}
	w.emitMu.Unlock()
	n := 0
	now := time.Now()
	// One object per critical section, so the handler is never held for
	// the whole snapshot. An object deleted meanwhile is simply skipped.
	for _, name := range names {
		w.emitMu.Lock()
		if o, ok := w.seen[name]; ok && w.shape.keep(OpSynced, o, nil) {
			w.opt.Out.Enqueue(w.change(OpSynced, o, now, id))
			n++
		}
		w.emitMu.Unlock()
	}
	w.marker(OpSnapshotCompleted, id, n)
	w.snapshotDone(start, n)
	w.log.Debug("snapshot enqueued", "snapshot", id, "records", n)
}

func (w *Watcher) snapshotDone(start time.Time, records int) {
	metrics.SnapshotRecords.WithLabelValues(w.name).Add(float64(records))
	metrics.SnapshotDuration.WithLabelValues(w.name).Observe(time.Since(start).Seconds())
	metrics.SnapshotLastRecords.WithLabelValues(w.name).Set(float64(records))
	metrics.SnapshotSize.WithLabelValues(w.name).Set(float64(records)) // deprecated name, one more release
}

func (w *Watcher) marker(op Op, id string, count int) {
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	rv := w.handledRV
	if w.resumer != nil && w.resumer.lastSync != nil {
		// The handler can be given the last object of a list before the
		// list's end: the reflector's version is then ahead of handledRV,
		// and a version too high only makes a reader pick an earlier
		// snapshot, while one too low would claim a state the window
		// does not hold (a delete between them unseen).
		if n, err := strconv.ParseUint(w.resumer.lastSync(), 10, 64); err == nil {
			rv = max(rv, n)
		}
	}
	snapshotRV := ""
	if rv > 0 {
		snapshotRV = strconv.FormatUint(rv, 10)
	}
	w.opt.Out.Enqueue(&Change{Op: op, Resource: w.res, Key: w.res.KeyPrefix, SnapshotID: id, Count: count, SnapshotRV: snapshotRV, Observed: time.Now()})
}

// noteRV raises handledRV to rv. Versions that are not decimal (not
// etcd's) leave it as it is: markers then carry none. The caller holds
// emitMu.
func (w *Watcher) noteRV(rv string) {
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil && n > w.handledRV {
		w.handledRV = n
	}
}

var lastSnapshot atomic.Int64

// newSnapshotID returns an id unique within the process and increasing
// across restarts: the clock in base 36, bumped past the last id issued.
func newSnapshotID() string {
	for {
		last := lastSnapshot.Load()
		next := max(time.Now().UnixNano(), last+1)
		if lastSnapshot.CompareAndSwap(last, next) {
			return strconv.FormatInt(next, 36)
		}
	}
}

// Removed sends the marker that the resource is gone (OpRemoved), with
// uid, the uid of what was removed. Call it after Run has returned, so
// that every change the informer had queued (the deletes the CRD's
// finalizer made) is ahead of it in the stream.
func (w *Watcher) Removed(uid string) {
	if w.res == nil {
		return // never resolved: nothing of it was streamed
	}
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	w.opt.Out.Enqueue(&Change{Op: OpRemoved, Resource: w.res, Key: w.res.KeyPrefix, RemovedUID: uid, Observed: time.Now()})
}
