package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
)

// Output receives the Changes of a watched resource. Enqueue is called from
// the informer's notification goroutine and must not block: client-go queues
// the notifications of a slow handler without bound.
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
}

// Watcher runs the shared informer of one configured resource and turns its
// notifications into Changes.
type Watcher struct {
	opt  Options
	cfg  config.Resource
	gvr  schema.GroupVersionResource
	name string
	log  *slog.Logger

	res      *Resource
	shape    *shaper
	informer cache.SharedIndexInformer
	synced   atomic.Bool
	state    atomic.Value // State

	// emitMu orders every Enqueue, and guards seen: a handler records an
	// object and enqueues its change in one critical section, and a snapshot
	// reads a record and enqueues it in one, so each record lands in the
	// stream exactly between the changes before and after it.
	emitMu sync.Mutex
	seen   lastSeen
	// handleHook, when set, runs first in every handler call. Tests use it
	// to hold the handler while client-go queues notifications behind it;
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
	sentinel, err := w.sentinel()
	if err != nil {
		return err
	}
	w.source = newDrainSource(sentinel)
	if w.cfg.RawCache() {
		if w.informer, err = w.newRawInformer(); err != nil {
			return err
		}
	} else {
		w.informer = w.newInformer()
	}

	snap := w.cfg.Emits(config.OpSynced)
	initialStart := time.Now()
	if snap {
		w.initialID = newSnapshotID()
		w.marker(OpSnapshotStarted, w.initialID, 0)
	}
	reg, err := w.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    w.onAdd,
		UpdateFunc: w.onUpdate,
		DeleteFunc: w.onDelete,
	})
	if err != nil {
		return fmt.Errorf("informer for %s: %w", w.name, err)
	}

	// The informer outlives ctx until the drain is over: cancelling it
	// would discard the notifications still queued for the handler.
	infCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.informer.RunWithContext(infCtx)
	}()
	defer wg.Wait()
	defer stopInformer()

	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		// Stopped during the initial list. Only that list's records can
		// be queued; its snapshot never gets a completed marker, so no
		// consumer acts on it, and the next start lists everything again.
		return nil
	}
	n := int(w.initialCount.Load())
	if snap {
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
	return w.drain()
}

// snapshotEvery takes periodic snapshots until ctx ends.
func (w *Watcher) snapshotEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	deferred := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			deferred = w.periodicSnapshot(deferred)
		}
	}
}

// drain closes the informer's source and waits, at most DrainTimeout, for
// the handler to meet the sentinel, which it does once every notification
// queued before it has reached the Output.
func (w *Watcher) drain() error {
	start := time.Now()
	w.source.stop()
	t := time.NewTimer(w.opt.DrainTimeout)
	defer t.Stop()
	select {
	case <-w.drained:
		w.log.Debug("informer drained", "took", time.Since(start).Round(time.Millisecond))
		return nil
	case <-t.C:
		w.log.Error("shutdown: notifications still queued for the sinks at the drain deadline; they are lost",
			"drainTimeout", w.opt.DrainTimeout)
		return fmt.Errorf("%s: %w after %s", w.name, ErrNotDrained, w.opt.DrainTimeout)
	}
}

// sentinel returns the object that ends the stream at shutdown, of the
// informer's own type: the reflector drops an event of any other type.
func (w *Watcher) sentinel() (runtime.Object, error) {
	if w.cfg.RawCache() {
		o, err := raw.New([]byte(`{"metadata":{"name":"`+drainName+`"}}`), raw.BuildOptions{})
		if err != nil {
			return nil, fmt.Errorf("drain sentinel: %w", err)
		}
		return o, nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetName(drainName)
	return u, nil
}

// isSentinel reports whether obj ends the stream, and if so records that
// the handler got there. The informer passes the very object the source
// sent (the transform keeps it), so identity is enough.
func (w *Watcher) isSentinel(obj any) bool {
	if w.source == nil || obj != any(w.source.sentinel) {
		return false
	}
	w.drainedOnce.Do(func() { close(w.drained) })
	return true
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
		if c := w.syncedChange(w.seen[name], now, id); c != nil {
			w.opt.Out.Enqueue(c)
			n++
		}
		w.emitMu.Unlock()
	}
	w.marker(OpSnapshotCompleted, id, n)
	w.snapshotDone(start, n)
	w.log.Debug("snapshot enqueued", "snapshot", id, "records", n)
}

// syncedChange is the snapshot record of obj, or nil if shaping drops it.
func (w *Watcher) syncedChange(obj any, now time.Time, id string) *Change {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if w.shape.keep(OpSynced, o, nil) {
			return w.change(OpSynced, o, now, id)
		}
	case *raw.Object:
		if w.shape.keepRaw(OpSynced, o, nil) {
			return w.changeRaw(OpSynced, o, now, id)
		}
	}
	return nil
}

// observed returns the observed-events counter of op, looked up once per op
// rather than hashed per event.
func (w *Watcher) observed(op Op) prometheus.Counter {
	if c, ok := w.mObserved.Load(op); ok {
		return c.(prometheus.Counter)
	}
	c := metrics.EventsObserved.WithLabelValues(w.name, string(op))
	w.mObserved.Store(op, c)
	return c
}

// observe counts a change of op seen at now and, for a live change (not a
// snapshot record), stamps the resource's last-event time. It is on the
// per-event path: both metrics are cached children, no label hashing.
func (w *Watcher) observe(op Op, now time.Time) {
	w.observed(op).Inc()
	switch op {
	case OpAdded, OpUpdated, OpDeleted:
		w.mLastEvent().Set(float64(now.UnixNano()) / 1e9)
	}
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
	w.opt.Out.Enqueue(&Change{Op: op, Resource: w.res, Key: w.res.KeyPrefix, SnapshotID: id, Count: count, Observed: time.Now()})
}

func (w *Watcher) change(op Op, u *unstructured.Unstructured, now time.Time, snapshotID string) *Change {
	w.observe(op, now)
	return &Change{
		Op:         op,
		Resource:   w.res,
		Key:        w.shape.key(w.res, u),
		Object:     u,
		SnapshotID: snapshotID,
		Observed:   now,
	}
}

// handled records obj as the handler's latest view of its object and
// enqueues c, if the notification emits anything, in one critical section.
// Every notification is recorded, emitted or not: a snapshot lists what
// the cluster holds, whatever the configured operations and filters let
// through as live changes.
func (w *Watcher) handled(obj any, c *Change) {
	name, ok := nameOf(obj)
	w.emitMu.Lock()
	if ok {
		w.seen[name] = obj
	}
	if c != nil {
		w.opt.Out.Enqueue(c)
	}
	w.emitMu.Unlock()
}

// gone is handled for a delete: the object leaves the handler's view.
func (w *Watcher) gone(obj any, c *Change) {
	name, ok := nameOf(obj)
	w.emitMu.Lock()
	if ok {
		delete(w.seen, name)
	}
	if c != nil {
		w.opt.Out.Enqueue(c)
	}
	w.emitMu.Unlock()
}

func (w *Watcher) onAdd(obj any, initial bool) {
	if w.handleHook != nil {
		w.handleHook()
	}
	if w.isSentinel(obj) {
		return
	}
	w.handled(obj, w.addChange(obj, initial))
}

func (w *Watcher) addChange(obj any, initial bool) *Change {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		if r, isR := obj.(*raw.Object); isR {
			return w.addChangeRaw(r, initial)
		}
		return nil
	}
	if initial && w.initialID != "" {
		if !w.shape.keep(OpSynced, u, nil) {
			return nil
		}
		w.initialCount.Add(1)
		return w.change(OpSynced, u, time.Now(), w.initialID)
	}
	if initial || !w.cfg.Emits(config.OpAdded) || !w.shape.keep(OpAdded, u, nil) {
		return nil
	}
	return w.change(OpAdded, u, time.Now(), "")
}

func (w *Watcher) onUpdate(oldObj, newObj any) {
	if w.handleHook != nil {
		w.handleHook()
	}
	if w.isSentinel(newObj) {
		return
	}
	w.handled(newObj, w.updateChange(oldObj, newObj))
}

func (w *Watcher) updateChange(oldObj, newObj any) *Change {
	if ro, isR := oldObj.(*raw.Object); isR {
		if rn, isR := newObj.(*raw.Object); isR {
			return w.updateChangeRaw(ro, rn)
		}
		return nil
	}
	o, ok1 := oldObj.(*unstructured.Unstructured)
	n, ok2 := newObj.(*unstructured.Unstructured)
	// An unchanged resourceVersion is a relist or resync re-delivering what
	// was already emitted, not a change.
	if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() || !w.cfg.Emits(config.OpUpdated) ||
		!w.shape.keep(OpUpdated, n, o) {
		return nil
	}
	c := w.change(OpUpdated, n, time.Now(), "")
	c.OldObject = o
	return c
}

func (w *Watcher) onDelete(obj any) {
	if w.handleHook != nil {
		w.handleHook()
	}
	unknown := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, unknown = d.Obj, true
	}
	w.gone(obj, w.deleteChange(obj, unknown))
}

func (w *Watcher) deleteChange(obj any, unknown bool) *Change {
	if r, isR := obj.(*raw.Object); isR {
		return w.deleteChangeRaw(r, unknown)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || !w.cfg.Emits(config.OpDeleted) || !w.shape.keep(OpDeleted, u, nil) {
		return nil
	}
	c := w.change(OpDeleted, u, time.Now(), "")
	c.FinalStateUnknown = unknown
	return c
}

// retry runs step until it succeeds or ctx ends, backing off up to RetryMax.
// It reports whether step succeeded.
func (w *Watcher) retry(ctx context.Context, step func(context.Context, int) error) bool {
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err := step(ctx, attempt); err == nil {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, w.opt.RetryMax)
	}
}

// resolve finds the kind and scope of the configured resource through the
// discovery-backed REST mapper.
func (w *Watcher) resolve(ctx context.Context, attempt int) error {
	gvk, err := w.opt.Mapper.KindFor(w.gvr)
	var mapping *meta.RESTMapping
	if err == nil {
		mapping, err = w.opt.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		reason, state := "other", StateUnresolved
		if meta.IsNoMatchError(err) {
			reason, state = "not_found", StateNotServed
		}
		w.setState(state)
		metrics.InformerErrors.WithLabelValues(w.name, reason).Inc()
		if attempt == 1 || attempt%10 == 0 {
			if reason == "not_found" {
				if w.cfg.Optional {
					// Expected where the CRD is not installed: not a warning.
					w.log.Info("optional resource is not served by the cluster (is its CRD installed?); it does not hold readiness, and streams once it appears",
						"group", w.gvr.Group, "attempt", attempt)
				} else {
					w.log.Warn("resource is not served by the cluster (is its CRD installed?); retrying until it appears",
						"group", w.gvr.Group, "attempt", attempt)
				}
			} else {
				w.log.Error("cannot resolve resource; retrying", "attempt", attempt, "err", err)
			}
		}
		w.opt.Mapper.Reset()
		return err
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	if !namespaced && len(w.cfg.Namespaces) > 0 {
		w.log.Warn("resource is cluster-scoped; ignoring its namespaces list")
	}
	w.res = NewResource(w.opt.Cluster, w.gvr, gvk.Kind, namespaced)
	if attempt > 1 {
		w.log.Info("resource is now served; starting its informer", "kind", gvk.Kind)
	}
	return nil
}

// watchNamespaces are the namespaces that get a LIST and WATCH of their
// own: the configured ones when each is watched on its own (one namespace,
// or watchPerNamespace), else "" for one cluster-wide watch.
func (w *Watcher) watchNamespaces() []string {
	if w.res.Namespaced && w.cfg.PerNamespaceWatch() {
		return w.cfg.Namespaces
	}
	return []string{metav1.NamespaceAll}
}

// keep filters a cluster-wide watch down to the configured namespaces
// before objects are cached; nil when there is nothing to filter.
func (w *Watcher) keep() func(string) bool {
	if !w.res.Namespaced || len(w.cfg.Namespaces) < 2 || w.cfg.PerNamespaceWatch() {
		return nil
	}
	nss := slices.Clone(w.cfg.Namespaces)
	return func(ns string) bool { return slices.Contains(nss, ns) }
}

// listerWatcher is what the informer lists and watches with: lw(ns, keep)
// for one namespace or all of them, or one per namespace merged, wrapped
// so that shutdown can drain it. client tells the reflector whether it
// can stream lists; merged namespaces never do.
func (w *Watcher) listerWatcher(lw func(ns string, keep func(string) bool) *cache.ListWatch, client any) cache.ListerWatcher {
	nss := w.watchNamespaces()
	if len(nss) == 1 {
		return cache.ToListWatcherWithWatchListSemantics(w.source.wrap(lw(nss[0], w.keep())), client)
	}
	return listThenWatch{w.source.wrap(mergeNamespaces(nss, func(ns string) *cache.ListWatch { return lw(ns, nil) }))}
}

func (w *Watcher) checkAccess(ctx context.Context, attempt int) error {
	if w.opt.Access == nil {
		return nil
	}
	for _, ns := range w.watchNamespaces() {
		if err := w.checkAccessIn(ctx, ns, attempt); err != nil {
			return err
		}
	}
	return nil
}

func (w *Watcher) checkAccessIn(ctx context.Context, ns string, attempt int) error {
	for _, verb := range []string{"list", "watch"} {
		r, err := w.opt.Access.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: verb, Group: w.gvr.Group, Version: w.gvr.Version, Resource: w.gvr.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			// The review API itself failing says nothing about our
			// permission; let the informer try and report what it meets.
			w.log.Debug("access review failed; not pre-checking permission", "err", err)
			return nil
		}
		if !r.Status.Allowed {
			w.setState(StateForbidden)
			metrics.InformerErrors.WithLabelValues(w.name, "forbidden").Inc()
			if attempt == 1 || attempt%10 == 0 {
				w.log.Error("permission denied; this resource will not stream until it is granted",
					"verb", verb, "group", w.gvr.Group, "namespace", nsOrAll(ns), "reason", r.Status.Reason, "attempt", attempt)
			}
			return &ForbiddenError{Verb: verb, GVR: w.gvr, Namespace: ns}
		}
	}
	return nil
}

// ForbiddenError says which permission is missing.
type ForbiddenError struct {
	Verb      string
	GVR       schema.GroupVersionResource
	Namespace string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("permission denied: cannot %s %s in %s", e.Verb, e.GVR.GroupResource(), nsLabel(e.Namespace))
}

func nsOrAll(ns string) string {
	if ns == "" {
		return "(all namespaces)"
	}
	return ns
}

func nsLabel(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + strconv.Quote(ns)
}

func (w *Watcher) newInformer() cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(
		w.listerWatcher(w.unstructuredListWatch, w.opt.Dynamic),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: w.gvr.String()},
	)
	// The transform runs on freshly decoded objects before they are cached,
	// so stripping managedFields saves the memory, not just the bytes, and
	// redacted values never sit in the cache at all.
	if t := w.shape.transformFunc(); t != nil {
		_ = inf.SetTransform(t)
	}
	_ = inf.SetWatchErrorHandlerWithContext(w.watchError)
	return inf
}

// unstructuredListWatch lists and watches ns ("" for all) through the
// dynamic client; keep, when set, drops objects of other namespaces.
func (w *Watcher) unstructuredListWatch(ns string, keep func(string) bool) *cache.ListWatch {
	ri := w.opt.Dynamic.Resource(w.gvr).Namespace(ns)
	tweak := func(o *metav1.ListOptions) {
		o.LabelSelector = w.cfg.LabelSelector
		o.FieldSelector = w.cfg.FieldSelector
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			l, err := ri.List(ctx, o)
			if err != nil || keep == nil {
				return l, err
			}
			l.Items = slices.DeleteFunc(l.Items, func(u unstructured.Unstructured) bool { return !keep(u.GetNamespace()) })
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			wi, err := ri.Watch(ctx, o)
			if err != nil || keep == nil {
				return wi, err
			}
			return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Bookmark || e.Type == watch.Error {
					return e, true
				}
				m, err := meta.Accessor(e.Object)
				return e, err != nil || keep(m.GetNamespace())
			}), nil
		},
	}
}
func stripManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	}
	return obj, nil
}

// watchError replaces the reflector's default logging with one line that
// says what is wrong and a metric. The reflector keeps retrying by itself.
func (w *Watcher) watchError(ctx context.Context, _ *cache.Reflector, err error) {
	var reason string
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		reason = "expired"
		w.log.Info("watch expired; relisting", "err", err)
	case apierrors.IsForbidden(err):
		reason = "forbidden"
		// A restarted apiserver answers 403 until its RBAC caches have
		// loaded, and the reflector retries by itself: only a refusal that
		// lasts is an error an operator must act on.
		level := slog.LevelWarn
		if w.forbidden.lasted(time.Now(), forbiddenIsError) {
			level = slog.LevelError
		}
		w.log.Log(ctx, level, "permission denied listing or watching resource; retrying", "group", w.gvr.Group,
			"namespaces", w.watchNamespaces(), "err", err)
	case errors.Is(err, context.Canceled):
		return
	default:
		reason = "other"
		w.log.Warn("list/watch failed; retrying", "err", err)
	}
	metrics.InformerErrors.WithLabelValues(w.name, reason).Inc()
}

// forbiddenIsError is how long list/watch must keep being refused before
// it is logged as an error rather than a warning: longer than an apiserver
// takes to load its RBAC after a restart.
const forbiddenIsError = time.Minute

// episode tracks how long a recurring condition has lasted. Occurrences
// further apart than episodeGap (more than the reflector's longest backoff,
// 30 s) belong to different episodes. Only the reflector's goroutine uses
// it, so it needs no lock.
type episode struct{ since, last time.Time }

const episodeGap = 2 * time.Minute

// lasted records an occurrence at now and reports whether the episode has
// lasted longer than d.
func (e *episode) lasted(now time.Time, d time.Duration) bool {
	if e.last.IsZero() || now.Sub(e.last) > episodeGap {
		e.since = now
	}
	e.last = now
	return now.Sub(e.since) > d
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
