package app

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// DefaultCheckpointInterval is how often a moving checkpoint is saved: at
// most one write a second to the apiserver, and at most about a second of
// changes repeated after a crash.
const DefaultCheckpointInterval = time.Second

// checkpointLoadTimeout bounds the wait for the checkpoint at start: an
// apiserver that cannot answer that long cannot serve the lists either.
const checkpointLoadTimeout = 30 * time.Second

// resumeFromCheckpoint loads the checkpoint, sets where each watcher
// resumes, and saves the checkpoint while ctx runs. The func it returns
// saves it a last time, after the sinks have drained, and waits for the
// saver to stop. Without a checkpoint store it does nothing.
func (a *App) resumeFromCheckpoint(ctx context.Context) (stop func()) {
	store := a.opt.Checkpoint
	if store == nil {
		return func() {}
	}
	loadCtx, cancel := context.WithTimeout(ctx, checkpointLoadTimeout)
	entries, err := a.loadCheckpoint(loadCtx, store)
	cancel()
	if err != nil {
		// Resuming is impossible, and which versions were lost is unknown:
		// say so loudly. The snapshot still converges every consumer.
		a.log.Error("checkpoint not read; every resource starts from a fresh list, and changes made while kubewire was down are not resumed", "lease", store.Name(), "err", err)
	}
	// A spool that survived has its own position beside it, further along
	// than the Lease while a sink was down: what it holds is replayed, so
	// the watch resumes after it.
	var positions map[string]checkpoint.Entry
	if a.positions != nil {
		if positions, err = a.positions.Load(); err != nil {
			a.log.Warn("spool positions unreadable; resuming from the checkpoint", "err", err)
		}
		// The file is one for every sink, and counts what each spooled as
		// kept: a sink whose spool is gone or lost records would resume
		// past changes it never delivered. It goes, so that a crash
		// before the next save cannot trust it either.
		if changed := a.spoolsNotAsLeft(); len(positions) > 0 && len(changed) > 0 {
			a.log.Warn("spool positions not used: these sinks' spools are not as the last run left them, so the positions may count changes they no longer hold; resuming from the checkpoint",
				"sinks", changed)
			positions = nil
			if err := a.positions.Remove(); err != nil {
				a.log.Warn("spool positions not removed", "err", err)
			}
		}
	}
	// While the spools replay what an earlier process left, the resume
	// points may be past changes that are only there: the checkpoints stay
	// at what every sink had acknowledged until the replay is delivered,
	// and the spool's position, which the replay consumes, is not kept.
	hold := a.replayed()
	if hold != nil && a.positions != nil {
		if err := a.positions.Remove(); err != nil {
			a.log.Warn("spool positions not removed while the spool replays", "err", err)
		}
	}
	a.loadedMu.Lock()
	a.loaded = entries
	a.loadedMu.Unlock()
	from := map[string]map[string]string{}
	uids := a.uids()
	for _, w := range a.allWatchers() {
		if r := resumeOf(w.ConfigHash(), uids[w.Name()], entries[w.Name()], positions[w.Name()]); r != nil {
			if r.Reason != "" {
				a.log.Warn("the resource's config changed since its checkpoint was written: not resuming, declaring a gap", "resource", w.Name())
			} else {
				a.log.Info("resuming from the checkpoint", "resource", w.Name(), "streams", r.Streams)
				from[w.Name()] = r.Streams
				if hold != nil {
					if e := entries[w.Name()]; e.Hash == w.ConfigHash() {
						r.Acked = e.Streams
					}
					r.Hold = hold
				}
			}
			w.SetResume(r)
		}
	}
	// What the watches deliver again is not replayed from the spools: it
	// would come twice, and the spool's copy first, before versions of
	// its key the kill lost from memory (dispatch.SetReplaySkip).
	if len(from) > 0 {
		for _, d := range a.dispatchers {
			d.SetReplaySkip(func(c *informer.Change, ev *encoding.Event) bool { return afterResume(from, c, ev) })
		}
	}
	every := a.opt.CheckpointInterval
	if every <= 0 {
		every = DefaultCheckpointInterval
	}
	saveCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		store.Run(saveCtx, every, a.checkpoints)
	}()
	if a.positions != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if hold != nil {
				select {
				case <-hold:
				case <-saveCtx.Done():
					return
				}
			}
			a.savePositionsEvery(saveCtx, every)
		}()
	}
	return func() {
		stopRun()
		wg.Wait()
		finalCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := store.Save(finalCtx, a.checkpoints()); err != nil {
			a.log.Warn("checkpoint not saved at shutdown; the next start repeats what was delivered since the last save", "err", err)
		}
		if a.positions != nil && closed(hold) {
			if err := a.positions.Save(a.spoolPositions()); err != nil {
				a.log.Warn("spool positions not saved at shutdown", "err", err)
			}
		}
	}
}

// spoolsNotAsLeft names the spooling sinks whose spool is not as the last
// run left it (dispatch.Dispatcher.SpoolAsLeft).
func (a *App) spoolsNotAsLeft() []string {
	var out []string
	for _, sc := range a.opt.Config.Sinks {
		if sc.Overflow == config.OverflowSpool && !a.dispatchers[sc.Name].SpoolAsLeft() {
			out = append(out, sc.Name)
		}
	}
	return out
}

// resumeOf is where a resource with config hash resumes: from the newer of
// its checkpoint and its spool's position, per stream, of those written
// under the same config; nil for a fresh start. uid is the uid of the CRD
// of a discovered resource: a checkpoint of another CRD of the same name
// is not this resource's, and is not resumed, nor a gap declared from it.
func resumeOf(hash, uid string, cp, pos checkpoint.Entry) *informer.Resume {
	if cp.UID != uid {
		cp = checkpoint.Entry{}
	}
	if pos.UID != uid {
		pos = checkpoint.Entry{}
	}
	var streams map[string]string
	for _, e := range []checkpoint.Entry{cp, pos} {
		if e.Hash != hash || len(e.Streams) == 0 {
			continue
		}
		if streams == nil {
			streams = map[string]string{}
		}
		for k, rv := range e.Streams {
			if newer(rv, streams[k]) {
				streams[k] = rv
			}
		}
	}
	switch {
	case streams != nil:
		return &informer.Resume{Streams: streams}
	case len(cp.Streams) > 0:
		return &informer.Resume{Streams: cp.Streams, Reason: informer.GapConfigChanged}
	}
	return nil
}

// newer reports whether resourceVersion a is after b ("" is before all).
func newer(a, b string) bool {
	if b == "" {
		return a != ""
	}
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// savePositionsEvery writes the spool positions every interval until ctx
// ends.
func (a *App) savePositionsEvery(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		if err := a.positions.Save(a.spoolPositions()); err != nil {
			a.log.Warn("spool positions not saved; retrying", "err", err)
		}
	})
}

// spoolPositions collects every running watcher's spool position.
func (a *App) spoolPositions() map[string]checkpoint.Entry {
	ws, uids := a.allWatchers(), a.uids()
	out := make(map[string]checkpoint.Entry, len(ws))
	for _, w := range ws {
		if p := w.SpoolPosition(); len(p) > 0 {
			out[w.Name()] = checkpoint.Entry{Hash: w.ConfigHash(), Streams: p, UID: uids[w.Name()]}
		}
	}
	return out
}

// loadCheckpoint retries a failing read until ctx ends.
func (a *App) loadCheckpoint(ctx context.Context, store *checkpoint.Store) (map[string]checkpoint.Entry, error) {
	wait := 500 * time.Millisecond
	for {
		entries, err := store.Load(ctx)
		if err == nil {
			return entries, nil
		}
		a.log.Warn("reading checkpoint; retrying", "err", err)
		if !tick.Sleep(ctx, wait) {
			return nil, err
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// checkpoints collects every watcher's checkpoint, and hands the store
// the names of resources removed since the last call.
func (a *App) checkpoints() map[string]checkpoint.Entry {
	a.loadedMu.Lock()
	gone := a.forgotten
	a.forgotten = nil
	a.loadedMu.Unlock()
	if len(gone) > 0 {
		a.opt.Checkpoint.Forget(gone...)
	}
	ws, uids := a.allWatchers(), a.uids()
	out := make(map[string]checkpoint.Entry, len(ws))
	now := time.Now()
	for _, w := range ws {
		streams, at := w.Checkpoint()
		if len(streams) == 0 {
			continue
		}
		out[w.Name()] = checkpoint.Entry{Hash: w.ConfigHash(), Streams: streams, UID: uids[w.Name()], Settled: w.SettledCheckpoint()}
		metrics.CheckpointAge.WithLabelValues(w.Name()).Set(now.Sub(at).Seconds())
	}
	return out
}

// afterResume reports whether a spooled object event is after the version
// its watch stream resumes from, so that the watch delivers it again.
func afterResume(from map[string]map[string]string, c *informer.Change, ev *encoding.Event) bool {
	if c.Resource == nil {
		return false
	}
	streams := from[c.Resource.KeyPrefix]
	if streams == nil {
		return false
	}
	at, ok := streams[ev.Extension(encoding.ExtNamespace)]
	if !ok {
		at, ok = streams[""]
	}
	if !ok {
		return false
	}
	return newer(ev.Extension(encoding.ExtResourceVersion), at)
}

// replayed is closed once every dispatcher has delivered what an earlier
// process left in its spool; nil when none left anything.
func (a *App) replayed() <-chan struct{} {
	var waits []<-chan struct{}
	for _, d := range a.dispatchers {
		if d.OldRecords() > 0 {
			waits = append(waits, d.Replayed())
		}
	}
	if len(waits) == 0 {
		return nil
	}
	all := make(chan struct{})
	go func() {
		for _, w := range waits {
			<-w
		}
		close(all)
	}()
	return all
}

// closed reports whether c is nil or closed.
func closed(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
