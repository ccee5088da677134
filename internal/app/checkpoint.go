package app

import (
	"context"
	"sync"
	"time"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/checkpoint"
	"github.com/kubewire/kubewire/internal/metrics"
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
	for _, w := range a.watchers {
		e, ok := entries[w.Name()]
		if !ok || len(e.Streams) == 0 {
			continue
		}
		r := &informer.Resume{Streams: e.Streams}
		if e.Hash != w.ConfigHash() {
			r.Reason = informer.GapConfigChanged
			a.log.Warn("the resource's config changed since its checkpoint was written: not resuming, declaring a gap", "resource", w.Name())
		}
		w.SetResume(r)
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
	return func() {
		stopRun()
		wg.Wait()
		finalCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := store.Save(finalCtx, a.checkpoints()); err != nil {
			a.log.Warn("checkpoint not saved at shutdown; the next start repeats what was delivered since the last save", "err", err)
		}
	}
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
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// checkpoints collects every running watcher's checkpoint.
func (a *App) checkpoints() map[string]checkpoint.Entry {
	out := make(map[string]checkpoint.Entry, len(a.watchers))
	now := time.Now()
	for _, w := range a.watchers {
		streams, at := w.Checkpoint()
		if len(streams) == 0 {
			continue
		}
		out[w.Name()] = checkpoint.Entry{Hash: w.ConfigHash(), Streams: streams}
		metrics.CheckpointAge.WithLabelValues(w.Name()).Set(now.Sub(at).Seconds())
	}
	return out
}
