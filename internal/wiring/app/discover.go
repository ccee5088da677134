package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// Rediscovery. Discovery is read again whenever a CustomResourceDefinition
// changes, and every rediscoverEvery besides, for what no CRD announces
// (an aggregated API that comes back). The apiserver publishes a CRD's
// change in discovery a moment after the CRD itself, so a change is looked
// for again every rediscoverSoon, rediscoverSettle times.
const (
	rediscoverEvery = 30 * time.Second
	rediscoverSoon  = time.Second
	// rediscoverSettle is how many more looks follow a change of a CRD: a
	// version no longer served, say, leaves discovery a few seconds after
	// the CRD says so.
	rediscoverSettle = 10
	// crdSyncTimeout bounds the wait for the first list of CRDs at start:
	// without it (no permission to list them, say) discovery still runs,
	// only without telling a removed resource from an unavailable one.
	crdSyncTimeout = 10 * time.Second
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// discovered is one resource a discover entry streams.
type discovered struct {
	w   *informer.Watcher
	gvr schema.GroupVersionResource
	// uid is the uid of the resource's CRD when it started, "" for a
	// resource no CRD defines. A checkpoint is resumed only under the
	// same uid: a CRD deleted and created again is a new resource.
	uid string
	// cancel stops a running watcher; done is closed when it returned.
	// Both are nil while the resource is unavailable (parked).
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *discovered) running() bool { return d.cancel != nil }

// discoverer turns discover entries into watchers, at start and whenever
// discovery changes.
type discoverer struct {
	a    *App
	log  *slog.Logger
	disc discovery.DiscoveryInterface
	crds cache.SharedIndexInformer
	kick chan struct{}

	mu        sync.Mutex
	resources map[string]*discovered // by watcher name
	failed    []string               // group versions discovery could not read
	ready     bool                   // the first discovery succeeded
	runCtx    context.Context
}

func newDiscoverer(a *App, disc discovery.DiscoveryInterface) *discoverer {
	d := &discoverer{a: a, log: a.log.With("component", "discovery"), disc: disc,
		kick: make(chan struct{}, 1), resources: map[string]*discovered{}}
	d.crds = dynamicinformer.NewFilteredDynamicInformer(a.deps.dyn, crdGVR, "", 0, cache.Indexers{}, nil).Informer()
	_, _ = d.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.poke() },
		UpdateFunc: func(any, any) { d.poke() },
		DeleteFunc: func(any) { d.poke() },
	})
	return d
}

func (d *discoverer) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// start reads discovery until it answers (in part at least) or ctx ends,
// and creates the watchers of what it selects, not yet running: Run sets
// where they resume before it starts them.
func (d *discoverer) start(ctx context.Context) {
	go d.crds.RunWithContext(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, crdSyncTimeout)
	if !cache.WaitForCacheSync(syncCtx.Done(), d.crds.HasSynced) && ctx.Err() == nil {
		d.log.Warn("CustomResourceDefinitions not listed; a resource that leaves discovery counts as unavailable, never as removed, until they are")
	}
	cancel()
	wait := 500 * time.Millisecond
	for {
		served, err := d.served()
		if err == nil {
			d.mu.Lock()
			for _, r := range d.a.opt.Config.Expand(served) {
				if r.Discovered {
					d.add(r, nil)
				}
			}
			d.ready = true
			d.mu.Unlock()
			d.setLanes()
			return
		}
		d.log.Error("discovery failed; retrying", "err", err)
		if !tick.Sleep(ctx, wait) {
			return
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// run starts the watchers start created and follows discovery until ctx
// ends. It returns at once; a.wg counts it.
func (d *discoverer) run(ctx context.Context) {
	d.mu.Lock()
	d.runCtx = ctx
	for _, r := range d.resources {
		d.launch(r)
	}
	d.mu.Unlock()
	d.a.wg.Add(1)
	go func() {
		defer d.a.wg.Done()
		every := time.NewTicker(rediscoverEvery)
		defer every.Stop()
		var soon <-chan time.Time
		settle := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-every.C:
			case <-d.kick:
				// The apiserver publishes a CRD's change in discovery a
				// moment after the CRD itself: look again for a while.
				settle = rediscoverSettle
			case <-soon:
			}
			soon = nil
			d.reconcile()
			if settle > 0 {
				settle--
				soon = time.After(rediscoverSoon)
			}
		}
	}()
}

// served asks discovery for every resource at its group's preferred
// version and keeps those kubewire can stream. Groups that fail are
// recorded (metric, /readyz) and the rest is returned.
func (d *discoverer) served() ([]schema.GroupVersionResource, error) {
	gvrs, failed, err := ServedResources(d.disc, d.log)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	for _, gv := range d.failed {
		if !slices.Contains(failed, gv) {
			metrics.DiscoveryFailed.DeleteLabelValues(gv)
		}
	}
	d.failed = failed
	d.mu.Unlock()
	for _, gv := range failed {
		metrics.DiscoveryFailed.WithLabelValues(gv).Set(1)
	}
	return gvrs, nil
}

// ServedResources is what discover entries choose from: every resource the
// cluster serves with list and watch, at its group's preferred version,
// without subresources (each skipped one is logged at debug level). A
// group version discovery cannot read is logged and listed in failed, and
// the rest is returned; err is set only when discovery failed as a whole.
func ServedResources(disc discovery.DiscoveryInterface, log *slog.Logger) (gvrs []schema.GroupVersionResource, failed []string, err error) {
	lists, err := discovery.ServerPreferredResources(disc)
	if err != nil {
		var gerr *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &gerr) {
			return nil, nil, err
		}
		for gv, e := range gerr.Groups {
			failed = append(failed, gv.String())
			log.Warn("discovery of a group failed; its resources are not streamed until it answers, the others are", "groupVersion", gv.String(), "err", e)
		}
		sort.Strings(failed)
	}
	return streamable(lists, log), failed, nil
}

// streamable keeps the resources that support list and watch, and no
// subresource.
func streamable(lists []*metav1.APIResourceList, log *slog.Logger) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			switch {
			case strings.Contains(r.Name, "/"):
				log.Debug("discovery: skipping a subresource", "groupVersion", l.GroupVersion, "resource", r.Name)
			case !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch"):
				log.Debug("discovery: skipping a resource without list and watch", "groupVersion", l.GroupVersion, "resource", r.Name, "verbs", []string(r.Verbs))
			default:
				out = append(out, gv.WithResource(r.Name))
			}
		}
	}
	return out
}

// crd returns the CustomResourceDefinition of gr, if one exists.
func (d *discoverer) crd(gr schema.GroupResource) (*unstructured.Unstructured, bool) {
	if gr.Group == "" {
		return nil, false
	}
	obj, ok, err := d.crds.GetStore().GetByKey(gr.Resource + "." + gr.Group)
	if err != nil || !ok {
		return nil, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	return u, ok
}

// reconcile reads discovery again and brings the watchers in line: it
// starts what is new, restarts what moved to another version, parks what
// is unavailable and removes what is gone.
func (d *discoverer) reconcile() {
	served, err := d.served()
	if err != nil {
		d.log.Warn("discovery failed; keeping every resource as it is until it answers", "err", err)
		return
	}
	want := map[schema.GroupResource]config.Resource{}
	for _, r := range d.a.opt.Config.Expand(served) {
		if r.Discovered {
			want[r.GVR().GroupResource()] = r
		}
	}
	d.mu.Lock()
	failed := slices.Clone(d.failed)
	var removals []*discovered
	for name, r := range d.resources {
		gr := r.gvr.GroupResource()
		next, ok := want[gr]
		crd, hasCRD := d.crd(gr)
		switch {
		case ok && r.uid != "" && hasCRD && string(crd.GetUID()) != r.uid:
			// Deleted and created again between two looks: the old
			// resource is gone, the new one starts afresh.
			removals = append(removals, r)
			delete(d.resources, name)
		case ok && !r.running():
			d.log.Info("resource is back in discovery; resuming from its checkpoint", "resource", name)
			metrics.ResourceUnavailable.WithLabelValues(name).Set(0)
			streams, _ := r.w.Checkpoint()
			d.replace(r, next, streams)
		case ok && next.Version != r.gvr.Version:
			d.log.Info("the group's preferred version changed; the resource goes on at the new version from where it was", "resource", name, "from", r.gvr.Version, "to", next.Version)
			old := r.w
			d.stop(r)
			streams, _ := old.Checkpoint()
			d.replace(r, next, streams)
		case ok:
		case slices.Contains(failed, r.gvr.GroupVersion().String()) || (hasCRD && crd.GetDeletionTimestamp() == nil):
			if r.running() {
				d.log.Warn("resource is no longer in discovery, though it was not removed; it is unavailable until it comes back, and then resumes from its checkpoint", "resource", name)
				metrics.ResourceUnavailable.WithLabelValues(name).Set(1)
				d.stop(r)
			}
		default:
			removals = append(removals, r)
			delete(d.resources, name)
		}
	}
	d.mu.Unlock()
	// Removals first: a CRD created again under the same name starts its
	// stream only after the old one's resource.removed.
	for _, r := range removals {
		d.remove(r)
	}
	d.mu.Lock()
	for gr, r := range want {
		if d.resources[watcherName(gr)] == nil {
			d.add(r, nil)
			d.launch(d.resources[watcherName(gr)])
		}
	}
	d.mu.Unlock()
	d.setLanes()
	metrics.DiscoveredResources.Set(float64(d.count()))
}

func watcherName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// add creates the watcher of r, resuming from streams if given, else from
// the checkpoint the process started with. Call with d.mu held.
func (d *discoverer) add(r config.Resource, streams map[string]string) {
	gr := r.GVR().GroupResource()
	x := &discovered{gvr: r.GVR()}
	if crd, ok := d.crd(gr); ok {
		x.uid = string(crd.GetUID())
	}
	x.w = d.a.newWatcher(r)
	switch {
	case streams != nil:
		x.w.SetResume(&informer.Resume{Streams: streams})
	case d.runCtx != nil:
		// Added while running: resume from what the process started with,
		// if it is this resource's (Run set the others' resume already).
		if res := resumeOf(x.w.ConfigHash(), x.uid, d.a.loadedEntry(x.w.Name()), checkpoint.Entry{}); res != nil {
			x.w.SetResume(res)
		}
	}
	d.resources[x.w.Name()] = x
}

// replace starts r again for next, resuming from streams. Call with d.mu
// held.
func (d *discoverer) replace(r *discovered, next config.Resource, streams map[string]string) {
	uid := r.uid
	d.add(next, streams)
	nr := d.resources[r.w.Name()]
	nr.uid = uid
	d.launch(nr)
}

// launch runs r's watcher. Call with d.mu held.
func (d *discoverer) launch(r *discovered) {
	if d.runCtx == nil || d.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(d.runCtx)
	r.cancel, r.done = cancel, make(chan struct{})
	done := r.done
	d.a.deps.mapper.Reset()
	d.a.launch(ctx, r.w, func() { close(done) })
}

// stop stops r's watcher and waits for it to drain. Call with d.mu held.
func (d *discoverer) stop(r *discovered) {
	if !r.running() {
		return
	}
	r.cancel()
	<-r.done
	r.cancel, r.done = nil, nil
}

// remove stops a resource that left the cluster: its informer drains (the
// deletes the CRD's finalizer made go out), then the resource.removed
// event, and its checkpoint is forgotten.
func (d *discoverer) remove(r *discovered) {
	name := r.w.Name()
	d.log.Info("resource removed from the cluster; its stream ends with resource.removed", "resource", name)
	d.awaitDeletes(r)
	d.stop(r)
	r.w.Removed(r.uid)
	metrics.ResourceUnavailable.DeleteLabelValues(name)
	metrics.InformerSynced.DeleteLabelValues(name)
	d.a.forget(name)
}

// removeGrace bounds how long remove waits for a removed resource's watch
// to bring the deletes its CRD's finalizer made; a variable for the tests.
var removeGrace = 5 * time.Second

// awaitDeletes waits, up to removeGrace, until r's informer holds nothing.
// The finalizer deleted every object before the resource left discovery,
// but discovery can show it gone before the watch has delivered the last
// of those deletes, and stopping the informer then would turn them into
// objects that only resource.removed covers. A watch that broke during the
// deletion relists into a 404 and never empties: resource.removed covers
// what it still holds once the wait is over.
func (d *discoverer) awaitDeletes(r *discovered) {
	if !r.running() || r.w.Held() <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(d.runCtx, removeGrace)
	defer cancel()
	tick.Every(ctx, 50*time.Millisecond, func() {
		if r.w.Held() == 0 {
			cancel()
		}
	})
	if n := r.w.Held(); n > 0 {
		d.log.Warn("removed resource still holds objects whose deletes never arrived; resource.removed covers them",
			"resource", r.w.Name(), "objects", n)
	}
}

// setLanes tells each sink how many resources it receives, so that each
// resource's share of the memory buffer keeps the sink's total bounded.
func (d *discoverer) setLanes() {
	for name, disp := range d.a.dispatchers {
		n := 0
		for _, w := range d.a.allWatchers() {
			if slices.Contains(w.Sinks(), name) {
				n++
			}
		}
		disp.SetLanes(n)
	}
}

func (d *discoverer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.resources)
}

// watchers returns every discovered resource's watcher, running or not,
// and whether each runs, by name.
func (d *discoverer) watchers() (all []*informer.Watcher, running map[string]bool, uids map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	running, uids = map[string]bool{}, map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(d.resources)) {
		r := d.resources[name]
		all = append(all, r.w)
		running[name] = r.running() || d.runCtx == nil
		uids[name] = r.uid
	}
	return all, running, uids
}

// status is what /readyz says of discovery.
func (d *discoverer) status() (ready bool, failed, unavailable []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(d.resources)) {
		if d.runCtx != nil && !d.resources[name].running() {
			unavailable = append(unavailable, name)
		}
	}
	return d.ready, slices.Clone(d.failed), unavailable
}

func (d *discoverer) String() string { return fmt.Sprintf("discoverer(%d resources)", d.count()) }
