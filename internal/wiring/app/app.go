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
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
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
	// OwnLeases names kubewire's own Leases (leader election, checkpoint).
	// A watch of Leases never sees them (a field selector on their names):
	// each checkpoint write would be a change to stream, and streaming it
	// a reason to write the checkpoint again.
	OwnLeases []string
}

// App is a running kubewire.
type App struct {
	opt         Options
	log         *slog.Logger
	deps        watcherDeps
	watchers    []*informer.Watcher // of the entries that name a resource
	dispatchers map[string]*dispatch.Dispatcher
	// positions is the spool's position file, when checkpoints are kept
	// and a sink spools.
	positions *checkpoint.File
	// disc runs the watchers of discover entries; nil without any.
	disc *discoverer
	// loaded is the checkpoint as read at start; forgotten names what was
	// removed since, so that it is dropped from the Lease.
	loadedMu  sync.Mutex
	loaded    map[string]checkpoint.Entry
	forgotten []string

	// wg counts every running watcher and the discoverer; errs collects
	// the watchers' drain failures.
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// watcherDeps are what every watcher is built with.
type watcherDeps struct {
	dyn     dynamic.Interface
	rawREST rest.Interface
	mapper  meta.ResettableRESTMapper
	authz   authorizationclient.AuthorizationV1Interface
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

	a := &App{opt: opt, log: opt.Logger, dispatchers: map[string]*dispatch.Dispatcher{},
		deps: watcherDeps{dyn: dyn, rawREST: rawREST, mapper: mapper, authz: authz}}
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
		if !rcfg.IsDiscover() {
			a.watchers = append(a.watchers, a.newWatcher(rcfg))
		}
	}
	if cfg.DiscoverEntries() {
		a.disc = newDiscoverer(a, disc)
	}
	return a, nil
}

// newWatcher builds the watcher of one resource.
func (a *App) newWatcher(rcfg config.Resource) *informer.Watcher {
	var out fanout
	for _, name := range rcfg.Sinks {
		out = append(out, a.dispatchers[name])
	}
	if rcfg.Group == "coordination.k8s.io" && rcfg.Resource == "leases" {
		rcfg.FieldSelector = withoutNames(rcfg.FieldSelector, a.opt.OwnLeases)
	}
	return informer.NewWatcher(informer.Options{
		Cluster:  a.opt.Config.Cluster,
		Resource: rcfg,
		Dynamic:  a.deps.dyn,
		REST:     a.deps.rawREST,
		Mapper:   a.deps.mapper,
		Access:   a.deps.authz.SelfSubjectAccessReviews(),
		Out:      out,
		Logger:   a.log,
		// Informers drain first and the sinks get what is left of the
		// same budget (Run).
		DrainTimeout: a.opt.Config.Dispatch.DrainTimeout.Duration,
		// Every sink acknowledges a change before the checkpoint
		// passes it.
		Acks: len(out),
	})
}

// withoutNames adds metadata.name!=<name> for each name to a field
// selector. Leases of those names are then left out in every namespace,
// which is all a field selector can say.
func withoutNames(selector string, names []string) string {
	parts := []string{}
	if selector != "" {
		parts = append(parts, selector)
	}
	for _, n := range names {
		parts = append(parts, "metadata.name!="+n)
	}
	return strings.Join(parts, ",")
}

// allWatchers is every watcher whose checkpoint is kept: the named
// resources', and the discovered ones', running or unavailable.
func (a *App) allWatchers() []*informer.Watcher {
	ws := slices.Clone(a.watchers)
	if a.disc != nil {
		d, _, _ := a.disc.watchers()
		ws = append(ws, d...)
	}
	return ws
}

// uids maps each discovered resource that a CRD defines to the CRD's uid,
// which its checkpoint belongs to.
func (a *App) uids() map[string]string {
	if a.disc == nil {
		return nil
	}
	_, _, uids := a.disc.watchers()
	return uids
}

// loadedEntry is the checkpoint of name as the process started with it.
func (a *App) loadedEntry(name string) checkpoint.Entry {
	a.loadedMu.Lock()
	defer a.loadedMu.Unlock()
	return a.loaded[name]
}

// launch runs w until ctx ends, counted in a.wg; then calls done.
func (a *App) launch(ctx context.Context, w *informer.Watcher, done func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if done != nil {
			defer done()
		}
		err := w.Run(ctx)
		switch {
		case errors.Is(err, informer.ErrNotDrained):
			// The watcher logged it; it counts against the exit code.
			a.mu.Lock()
			a.errs = append(a.errs, err)
			a.mu.Unlock()
		case err != nil:
			a.log.Error("watcher stopped", "resource", w.Name(), "err", err)
		}
	}()
}

// forget drops a removed resource's checkpoint.
func (a *App) forget(name string) {
	a.loadedMu.Lock()
	defer a.loadedMu.Unlock()
	delete(a.loaded, name)
	a.forgotten = append(a.forgotten, name)
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
	// Discover entries become watchers first, so that they resume from
	// the checkpoint as named ones do.
	if a.disc != nil {
		a.disc.start(ctx)
	}
	// Where each watch resumes is known before the spools replay: a spool
	// skips what the watch will deliver again (resumeFromCheckpoint).
	stopSaving := a.resumeFromCheckpoint(ctx)
	// The spools replay first (Start); then each watch resumes from its
	// checkpoint, behind them in every lane.
	for _, d := range a.dispatchers {
		d.Start()
	}
	for _, w := range a.watchers {
		a.launch(ctx, w, nil)
	}
	if a.disc != nil {
		a.disc.run(ctx)
	}
	a.log.Info("kubewire started", "version", version.Version, "resources", len(a.allWatchers()), "sinks", len(a.dispatchers))
	<-ctx.Done()
	timeout := a.opt.Config.Dispatch.DrainTimeout.Duration
	deadline := time.Now().Add(timeout)
	// Informers first: once they have drained and returned, nothing new is
	// enqueued and the dispatchers can drain to empty.
	a.wg.Wait()
	var mu sync.Mutex

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
	a.mu.Lock()
	defer a.mu.Unlock()
	return undelivered, errors.Join(a.errs...)
}
