package informer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// Output receives the Changes of a watched resource. Enqueue is called from
// the informer's notification goroutine and must not block: the informer
// queues the notifications of a slow handler without bound.
type Output interface {
	Enqueue(*Change)
}

// SnapshotTracker is an optional interface of an Output that knows whether
// a snapshot it was given is still waiting to be written. While one of a
// resource is pending, the Watcher skips that resource's periodic snapshots:
// a sink that is behind would otherwise queue one more full copy of the
// resource per interval.
type SnapshotTracker interface {
	// SnapshotPending reports whether a snapshot of the resource with this
	// key prefix (Resource.KeyPrefix) has been enqueued and not yet written
	// everywhere.
	SnapshotPending(keyPrefix string) bool
}

// Options configure a Watcher.
type Options struct {
	Cluster  string
	Resource config.Resource
	Dynamic  dynamic.Interface
	// Mapper resolves the configured group/version/resource to its kind and
	// scope. It is reset when a resource is not found, so a CRD installed
	// later is picked up.
	Mapper meta.ResettableRESTMapper
	// Access checks list/watch permission before the informer starts, so a
	// missing permission is one clear error instead of a reflector retrying
	// forever. Nil skips the check.
	Access authorizationclient.SelfSubjectAccessReviewInterface
	Out    Output
	Logger *slog.Logger
	// REST is a JSON client for any group and version (raw.NewRESTClient),
	// used by resources with cache: raw.
	REST rest.Interface
	// RetryMax caps the wait between attempts to resolve the resource or to
	// regain permission (default 10s).
	RetryMax time.Duration
	// DrainTimeout bounds how long shutdown waits for the handler to hand
	// the notifications client-go already queued to Out (default
	// config.DefaultDrainTimeout).
	DrainTimeout time.Duration
	// Acks is how many times each Change's Mark is Done before the change
	// is done (the number of sinks Out hands it to); 0 means 1.
	Acks int
}

// Watcher runs the informer of one configured resource and turns its
// notifications into Changes.
type Watcher struct {
	opt  Options
	cfg  config.Resource
	gvr  schema.GroupVersionResource
	name string
	log  *slog.Logger

	res      *Resource
	shape    *shaper
	informer *resourceInformer
	synced   atomic.Bool
	state    atomic.Value // State

	// emitMu orders every Enqueue, and guards seen: a handler records an
	// object and enqueues its change in one critical section, and a snapshot
	// reads a record and enqueues it in one, so each record lands in the
	// stream exactly between the changes before and after it.
	emitMu sync.Mutex
	seen   lastSeen
	// handledRV is the highest resourceVersion handled so far (an
	// object's, a list's end, a bookmark's), for snapshot markers (see
	// Change.SnapshotRV). Guarded by emitMu, so that a marker is stamped
	// with exactly what the changes enqueued before it reached.
	handledRV uint64
	// handleHook, when set, runs first in every handler call. Tests use it
	// to hold the handler while the informer queues notifications behind it;
	// nil in production.
	handleHook func()

	// source closes the informer's list and watch at shutdown and sends
	// the sentinel; drained is closed when the handler meets it.
	source      *drainSource
	drained     chan struct{}
	drainedOnce sync.Once
	// initialCount counts the synced records of the initial list; only the
	// notification goroutine writes it before HasSynced turns true.
	initialCount atomic.Int64
	mObserved    sync.Map // Op -> prometheus.Counter
	// mLastEvent is the resource's last-event-timestamp gauge, looked up
	// on the first change rather than hashed per event; created lazily so
	// that a resource without changes has no series (rather than 0, "1970").
	mLastEvent func() prometheus.Gauge
	initialID  string
	// forbidden times how long list/watch has been refused.
	forbidden episode

	// resume, when set, is where the watch streams start (SetResume).
	resume  *Resume
	resumer *resumer
	// streams is the progress of each watch stream (streams.go); single
	// is the only one, when there is one.
	streamsMu sync.Mutex
	streams   map[string]*progress
	single    *progress
	// noteListed says the notification being handled comes from a list;
	// snapshotAfterList asks for a snapshot once a gap's list is handled.
	// Only the handler's goroutine touches them.
	noteListed        bool
	snapshotAfterList bool
}

// NewWatcher returns a Watcher for one configured resource.
func NewWatcher(opt Options) *Watcher {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.RetryMax <= 0 {
		opt.RetryMax = 10 * time.Second
	}
	if opt.DrainTimeout <= 0 {
		opt.DrainTimeout = config.DefaultDrainTimeout
	}
	gvr := opt.Resource.GVR()
	name := gvr.Resource
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	return &Watcher{
		opt:     opt,
		cfg:     opt.Resource,
		gvr:     gvr,
		name:    name,
		log:     opt.Logger.With("resource", name, "version", gvr.Version),
		seen:    lastSeen{},
		drained: make(chan struct{}),
		mLastEvent: sync.OnceValue(func() prometheus.Gauge {
			return metrics.LastEventTimestamp.WithLabelValues(name)
		}),
	}
}

// Name is the resource's "<resource>[.<group>]" name, the label used in logs
// and metrics.
func (w *Watcher) Name() string { return w.name }

// HasSynced reports whether the initial list has been delivered.
func (w *Watcher) HasSynced() bool { return w.synced.Load() }

// Held is how many objects the informer holds once it has synced, and -1
// before. A deleted CRD's finalizer deletes every object before the
// resource leaves discovery, so a healthy watch empties the informer: the
// discoverer waits for that before it ends the stream (Removed).
func (w *Watcher) Held() int {
	if !w.synced.Load() {
		return -1
	}
	return len(w.informer.GetStore().ListKeys())
}

// Run resolves the resource, waits for permission, runs the informer and
// takes periodic snapshots until ctx ends. Nothing it meets at runtime is
// fatal: a missing resource or permission is logged, counted and retried, so
// the other resources keep streaming. When ctx ends after the initial sync,
// Run drains: it stops the watch and hands every notification client-go had
// already queued to the Output before the informer stops, or returns an
// error wrapping ErrNotDrained if that takes longer than DrainTimeout.
func (w *Watcher) Run(ctx context.Context) error {
	shp, err := newShaper(w.cfg, w.name, w.log)
	if err != nil {
		return fmt.Errorf("shaping for %s: %w", w.name, err)
	}
	w.shape = shp
	if !w.retry(ctx, w.resolve) {
		return nil
	}
	if !w.retry(ctx, w.checkAccess) {
		return nil
	}
	w.res.Payload = w.cfg.Payload
	w.setState(StateSyncing)
	w.initStreams()
	defer w.closeStreams()
	w.releaseWhenReplayed(ctx)
	if w.informer, err = w.newInformer(); err != nil {
		return err
	}

	snap := w.cfg.Emits(config.OpSynced)
	initialStart := time.Now()
	// A start that resumes from a checkpoint sends no snapshot: its list
	// only loads the store with what the stream already carried. If it
	// cannot resume, the gap opens the snapshot instead (streams.go).
	resuming := w.resume != nil && len(w.resume.Streams) > 0
	if snap && !resuming {
		w.initialID = newSnapshotID()
		w.marker(OpSnapshotStarted, w.initialID, 0)
	}
	// The informer outlives ctx until the drain is over: cancelling it
	// would discard the notifications still queued for the handler.
	infCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.informer.Run(infCtx)
	}()
	defer wg.Wait()
	defer stopInformer()

	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		// Stopped during the initial list. Its snapshot never gets a
		// completed marker, so no consumer acts on it, and the next start
		// lists everything again; but live changes the watch queued
		// behind the list are changes like any other, so drain.
		return w.drain(false)
	}
	n := int(w.initialCount.Load())
	if snap && w.initialID != "" {
		w.marker(OpSnapshotCompleted, w.initialID, n)
		w.snapshotDone(initialStart, n)
	}
	w.synced.Store(true)
	w.setState(StateSynced)
	metrics.InformerSynced.WithLabelValues(w.name).Set(1)
	w.log.Info("informer synced", "objects", len(w.informer.GetStore().ListKeys()), "snapshotRecords", n)

	if every := w.cfg.SnapshotInterval.Duration; snap && every > 0 {
		w.snapshotEvery(ctx, every)
	} else {
		<-ctx.Done()
	}
	return w.drain(true)
}

// retry runs step until it succeeds or ctx ends, backing off up to RetryMax.
// It reports whether step succeeded.
func (w *Watcher) retry(ctx context.Context, step func(context.Context, int) error) bool {
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err := step(ctx, attempt); err == nil {
			return true
		}
		if !tick.Sleep(ctx, wait) {
			return false
		}
		wait = min(wait*2, w.opt.RetryMax)
	}
}
