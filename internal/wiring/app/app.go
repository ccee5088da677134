// Package app wires a validated config into running informers, dispatchers
// and sinks, and shuts them down in the order that loses nothing.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/version"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/kafka"
	natssink "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/stdout"
)

// DefaultRegistry returns every sink type kubewire ships. Adding a sink
// type is adding its package's Spec here.
func DefaultRegistry() sinks.Registry {
	return sinks.NewRegistry(stdout.Spec, natssink.Spec, kafka.Spec, httpsink.Spec)
}

// Options are what Run needs besides the config.
type Options struct {
	Config *config.Config
	// REST reaches the cluster. Its QPS and Burst are replaced by the
	// config's.
	REST   *rest.Config
	Logger *slog.Logger
	// Registry defaults to DefaultRegistry().
	Registry sinks.Registry
	// Stdout is where the stdout sink writes (default os.Stdout).
	Stdout io.Writer
	// Checkpoint, when set, is where the watch streams' checkpoints are
	// kept: Run resumes each watch from it, and saves it while it runs
	// (checkpoint.go).
	Checkpoint *checkpoint.Store
	// CheckpointInterval is how often the checkpoint is saved when it
	// moved; default DefaultCheckpointInterval.
	CheckpointInterval time.Duration
}

// App is a running kubewire.
type App struct {
	opt         Options
	log         *slog.Logger
	watchers    []*informer.Watcher
	dispatchers map[string]*dispatch.Dispatcher
	// positions is the spool's position file, when checkpoints are kept
	// and a sink spools.
	positions *checkpoint.File
}

// New builds the sinks, dispatchers and watchers. Nothing connects yet.
func New(opt Options) (*App, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Registry == nil {
		opt.Registry = DefaultRegistry()
	}
	cfg := opt.Config
	for _, w := range cfg.Warnings() {
		opt.Logger.Warn("risky configuration", "warning", w)
	}
	rc := rest.CopyConfig(opt.REST)
	rc.QPS = cfg.Client.QPS
	rc.Burst = cfg.Client.Burst
	rc.UserAgent = "kubewire/" + version.Version

	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	authz, err := authorizationclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("authorization client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	// Resources with cache: raw read list and watch responses as bytes
	// through a plain JSON client; built only when one needs it.
	var rawREST rest.Interface
	for _, r := range cfg.Resources {
		if r.RawCache() && rawREST == nil {
			if rawREST, err = raw.NewRESTClient(rc); err != nil {
				return nil, fmt.Errorf("raw client: %w", err)
			}
		}
	}

	a := &App{opt: opt, log: opt.Logger, dispatchers: map[string]*dispatch.Dispatcher{}}
	deps := sinks.Deps{Stdout: opt.Stdout, Logger: opt.Logger}
	for _, sc := range cfg.Sinks {
		s, err := opt.Registry.New(sc, deps)
		if err != nil {
			return nil, err
		}
		lanes := 0
		for _, r := range cfg.Resources {
			if slices.Contains(r.Sinks, sc.Name) {
				lanes++
			}
		}
		d := dispatch.NewDispatcher(sc.Name, s, dispatch.Options{
			Lanes:        lanes,
			Shards:       cfg.Dispatch.Shards,
			BufferEvents: cfg.Dispatch.BufferEvents,
			BufferBytes:  cfg.Dispatch.BufferBytes,
			BatchSize:    cfg.Dispatch.BatchSize,
			Logger:       opt.Logger,
		})
		if sc.Overflow == config.OverflowSpool {
			dir := filepath.Join(cfg.Dispatch.SpoolDir, sc.Name)
			owner := spool.Owner{Cluster: cfg.Cluster, Sink: sc.Name, Type: sc.Type}
			err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: sc.Spool.MaxBytes, Fsync: sc.Spool.Fsync, Owner: owner})
			switch {
			case errors.Is(err, spool.ErrLocked), errors.Is(err, spool.ErrOwner):
				// The error names the directory and what to do.
				return nil, fmt.Errorf("sink %q: %w", sc.Name, err)
			case err != nil:
				return nil, fmt.Errorf("sink %q: spool in %s (dispatch.spoolDir, or set overflow: conflate): %w", sc.Name, dir, err)
			}
		}
		a.dispatchers[sc.Name] = d
	}
	if opt.Checkpoint != nil && slices.ContainsFunc(cfg.Sinks, func(s config.Sink) bool { return s.Overflow == config.OverflowSpool }) {
		a.positions = checkpoint.NewFile(cfg.Dispatch.SpoolDir)
	}
	for _, rcfg := range cfg.Resources {
		var out fanout
		for _, name := range rcfg.Sinks {
			out = append(out, a.dispatchers[name])
		}
		a.watchers = append(a.watchers, informer.NewWatcher(informer.Options{
			Cluster:  cfg.Cluster,
			Resource: rcfg,
			Dynamic:  dyn,
			REST:     rawREST,
			Mapper:   mapper,
			Access:   authz.SelfSubjectAccessReviews(),
			Out:      out,
			Logger:   opt.Logger,
			// Informers drain first and the sinks get what is left of the
			// same budget (Run).
			DrainTimeout: cfg.Dispatch.DrainTimeout.Duration,
			// Every sink acknowledges a change before the checkpoint
			// passes it.
			Acks: len(out),
		}))
	}
	return a, nil
}

// fanout hands each Change to every sink of its resource. The Item is shared
// so the CloudEvent is built once.
type fanout []*dispatch.Dispatcher

func (f fanout) Enqueue(c *informer.Change) {
	it := dispatch.NewItem(c)
	for _, d := range f {
		d.Enqueue(it)
	}
}

// SnapshotPending reports whether any sink of the resource still holds a
// snapshot of it: the slowest sink decides when the next one may start.
func (f fanout) SnapshotPending(keyPrefix string) bool {
	for _, d := range f {
		if d.SnapshotPending(keyPrefix) {
			return true
		}
	}
	return false
}

var _ informer.SnapshotTracker = fanout(nil)

// Run streams until ctx ends, then drains: each informer hands the
// notifications client-go already queued to the sinks, and the sinks
// deliver what they hold, all within one configured drain timeout. It
// returns the number of events the sinks could not deliver in that time,
// and an error wrapping informer.ErrNotDrained for each informer whose
// queue was not drained (both also logged).
func (a *App) Run(ctx context.Context) (undelivered int, err error) {
	// Where each watch resumes is known before the spools replay: a spool
	// skips what the watch will deliver again (resumeFromCheckpoint).
	stopSaving := a.resumeFromCheckpoint(ctx)
	// The spools replay first (Start); then each watch resumes from its
	// checkpoint, behind them in every lane.
	for _, d := range a.dispatchers {
		d.Start()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, w := range a.watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.Run(ctx)
			switch {
			case errors.Is(err, informer.ErrNotDrained):
				// The watcher logged it; it counts against the exit code.
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			case err != nil:
				a.log.Error("watcher stopped", "resource", w.Name(), "err", err)
			}
		}()
	}
	a.log.Info("kubewire started", "version", version.Version, "resources", len(a.watchers), "sinks", len(a.dispatchers))
	<-ctx.Done()
	timeout := a.opt.Config.Dispatch.DrainTimeout.Duration
	deadline := time.Now().Add(timeout)
	// Informers first: once they have drained and returned, nothing new is
	// enqueued and the dispatchers can drain to empty.
	wg.Wait()

	drainCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	var dwg sync.WaitGroup
	for name, d := range a.dispatchers {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			n := d.Close(drainCtx)
			mu.Lock()
			undelivered += n
			mu.Unlock()
			if n > 0 {
				a.log.Error("shutdown: events not delivered before the drain deadline", "sink", name, "undelivered", n, "drainTimeout", timeout)
			}
		}()
	}
	dwg.Wait()
	stopSaving()
	a.log.Info("kubewire stopped", "drained", time.Since(start).Round(time.Millisecond), "undelivered", undelivered)
	return undelivered, errors.Join(errs...)
}
