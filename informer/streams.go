package informer

import (
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// The Watcher's side of checkpoints (progress.go) and resuming
// (resume.go): it tracks each watch stream's changes in the order the
// handler is given them, and emits the gaps the resumer found.

// SetResume makes the next Run start each watch stream from its
// checkpoint. It must be called before Run.
func (w *Watcher) SetResume(r *Resume) { w.resume = r }

// Checkpoint is, per watch stream, the version up to which every change
// the stream delivered is done, and when the oldest of them last moved.
// It is empty until the informer runs.
func (w *Watcher) Checkpoint() (map[string]string, time.Time) {
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	if len(w.streams) == 0 {
		return nil, time.Time{}
	}
	out := make(map[string]string, len(w.streams))
	var oldest time.Time
	for k, p := range w.streams {
		rv, at := p.checkpoint()
		if rv == "" {
			continue
		}
		out[k] = rv
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return out, oldest
}

// SettledCheckpoint is, per watch stream, where the checkpoint was before
// the bookmarks that moved it since a change (or a list) last did: a
// checkpoint past it moved only because the stream was idle, and losing
// that move repeats no change after a crash.
func (w *Watcher) SettledCheckpoint() map[string]string {
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	out := make(map[string]string, len(w.streams))
	for k, p := range w.streams {
		if rv := p.settledCheckpoint(); rv != "" {
			out[k] = rv
		}
	}
	return out
}

// SpoolPosition is, per watch stream, the version up to which every change
// is done or written to a spool: where a restart on the same spool can
// resume, since the spool replays the rest.
func (w *Watcher) SpoolPosition() map[string]string {
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	out := make(map[string]string, len(w.streams))
	for k, p := range w.streams {
		if rv := p.spoolPosition(); rv != "" {
			out[k] = rv
		}
	}
	return out
}

// ConfigHash identifies the parts of the resource's config that decide
// what its stream carries; a checkpoint written under another hash is not
// resumed.
func (w *Watcher) ConfigHash() string { return w.cfg.Hash() }

// initStreams creates the progress of each watch stream, starting at its
// checkpoint when resuming.
func (w *Watcher) initStreams() {
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	for _, p := range w.streams {
		p.close()
	}
	w.streams = map[string]*progress{}
	for _, ns := range w.watchNamespaces() {
		k := streamKey(ns)
		from := ""
		if w.resume != nil && w.resume.Reason == "" {
			from = w.resume.Streams[k]
		}
		p := newProgress(from)
		if w.resume != nil && w.resume.Reason == "" && w.resume.Hold != nil {
			p.hold(w.resume.Acked[k])
		}
		w.streams[k] = p
	}
	w.single = nil
	if len(w.streams) == 1 {
		for _, p := range w.streams {
			w.single = p
		}
	}
}

// releaseWhenReplayed lets the checkpoints move once the resume's Hold is
// closed.
func (w *Watcher) releaseWhenReplayed(ctx context.Context) {
	if w.resume == nil || w.resume.Hold == nil {
		return
	}
	hold := w.resume.Hold
	w.streamsMu.Lock()
	streams := maps.Clone(w.streams)
	w.streamsMu.Unlock()
	go func() {
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
		for _, p := range streams {
			p.release()
		}
	}()
}

func (w *Watcher) closeStreams() {
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	for _, p := range w.streams {
		p.close()
	}
}

// streamOf is the stream an object's changes belong to.
func (w *Watcher) streamOf(o Object) *progress {
	if w.single != nil {
		return w.single
	}
	w.streamsMu.Lock()
	defer w.streamsMu.Unlock()
	return w.streams[o.GetNamespace()]
}

// track adds the notification of o to its stream, and marks c with its
// place there. The caller holds emitMu, so the stream's order is the
// order of the Output.
func (w *Watcher) track(o Object, c *Change) {
	p := w.streamOf(o)
	if p == nil {
		return
	}
	rv := ""
	if !w.noteListed {
		rv = o.GetResourceVersion()
	}
	acks := int32(0)
	if c != nil {
		acks = int32(max(w.opt.Acks, 1))
	}
	m := p.add(rv, acks)
	if c != nil {
		c.Mark = m
	}
}

func (w *Watcher) fromList(listed bool) { w.noteListed = listed }

// reached records a list's end or a bookmark in every stream it covers.
// After a list that declared a gap, a snapshot follows, once the informer
// has synced (the initial list's snapshot is framed by Run).
func (w *Watcher) reached(rv string, listed bool) {
	w.emitMu.Lock()
	w.noteRV(rv)
	w.emitMu.Unlock()
	w.streamsMu.Lock()
	for _, p := range w.streams {
		if listed {
			p.add(rv, 0)
		} else {
			p.addBookmark(rv)
		}
	}
	w.streamsMu.Unlock()
	if listed && w.snapshotAfterList {
		w.snapshotAfterList = false
		if w.synced.Load() && w.cfg.Emits(config.OpSynced) {
			w.Snapshot()
		}
	}
}

// gap emits the gap event. At the first list, it also opens the initial
// snapshot that a resumed start does not send; later, the snapshot
// follows the list.
func (w *Watcher) gap(g *Gap) {
	w.log.Warn("versions may be missing from the stream; declaring a gap, then a snapshot",
		"namespace", g.Namespace, "from", g.From, "to", g.To, "reason", g.Reason)
	metrics.Gaps.WithLabelValues(w.name, g.Reason).Inc()
	if from, err := strconv.ParseUint(g.From, 10, 64); err == nil {
		if to, err := strconv.ParseUint(g.To, 10, 64); err == nil && to > from {
			metrics.GapRevisions.WithLabelValues(w.name).Add(float64(to - from))
		}
	}
	c := &Change{Op: OpGap, Resource: w.res, Key: w.res.KeyPrefix, Gap: g, Observed: time.Now()}
	w.emitMu.Lock()
	// The gap is part of its stream: the checkpoint cannot pass it until
	// every sink has it, or a crash right after would lose the
	// declaration with the versions.
	w.streamsMu.Lock()
	if p := w.streams[g.Namespace]; p != nil {
		c.Mark = p.add("", int32(max(w.opt.Acks, 1)))
	}
	w.streamsMu.Unlock()
	w.opt.Out.Enqueue(c)
	w.emitMu.Unlock()
	switch {
	case !w.synced.Load() && w.initialID == "" && w.cfg.Emits(config.OpSynced):
		w.initialID = newSnapshotID()
		w.marker(OpSnapshotStarted, w.initialID, 0)
	case w.synced.Load():
		w.snapshotAfterList = true
	}
}
