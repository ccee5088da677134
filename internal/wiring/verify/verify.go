package verify

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
	"github.com/kubewire/kubewire/sinks"
)

// Options say what to verify.
type Options struct {
	Config *config.Config
	// Sink names the sink whose topic or stream is read.
	Sink string
	REST *rest.Config
}

// Report is the outcome of one verification.
type Report struct {
	Sink string
	// Events and Tombstones count what was read; Duplicates counts object
	// events whose id had been read before.
	Events, Tombstones, Duplicates int
	// Replays counts older events read again after a restart resumed
	// from its checkpoint (View.Replays).
	Replays   int
	Resources []ResourceReport
	// OrderViolations lists every resourceVersion that went backwards.
	OrderViolations []string
	// Gaps lists the gaps kubewire declared in the stream: ranges of
	// versions whose changes may be missing. They are not divergences: the
	// snapshot after each repairs the view.
	Gaps []Gap
}

// ResourceReport compares one resource's view with the cluster.
type ResourceReport struct {
	Name              string
	InView, InCluster int
	// Divergent lists missing, extra and stale keys.
	Divergent []string
	// Skipped says why the resource could not be compared, if it was not.
	Skipped string
}

// Diverged reports whether any key differs or any order was violated.
func (r *Report) Diverged() bool {
	if len(r.OrderViolations) > 0 {
		return true
	}
	for _, rr := range r.Resources {
		if len(rr.Divergent) > 0 {
			return true
		}
	}
	return false
}

// Print writes the divergent keys and a summary table.
func (r *Report) Print(w io.Writer) {
	for _, rr := range r.Resources {
		for _, d := range rr.Divergent {
			fmt.Fprintf(w, "%s: %s\n", rr.Name, d)
		}
	}
	for _, v := range r.OrderViolations {
		fmt.Fprintf(w, "order violation: %s\n", v)
	}
	for _, g := range r.Gaps {
		fmt.Fprintf(w, "gap: %s\n", g)
	}
	fmt.Fprintf(w, "sink %s: read %d events (%d duplicates, %d replayed after a resume) and %d tombstones\n", r.Sink, r.Events, r.Duplicates, r.Replays, r.Tombstones)
	fmt.Fprintf(w, "%-40s %8s %8s %10s\n", "RESOURCE", "VIEW", "CLUSTER", "DIVERGENT")
	for _, rr := range r.Resources {
		if rr.Skipped != "" {
			fmt.Fprintf(w, "%-40s %8d %8s %10s  not compared: %s\n", rr.Name, rr.InView, "-", "-", rr.Skipped)
			continue
		}
		fmt.Fprintf(w, "%-40s %8d %8d %10d\n", rr.Name, rr.InView, rr.InCluster, len(rr.Divergent))
	}
	fmt.Fprintf(w, "order violations: %d\n", len(r.OrderViolations))
	fmt.Fprintf(w, "gaps: %d\n", len(r.Gaps))
}

// Run reads the sink's topic(s) or stream from the beginning, applies the
// events by the consumer's rule of docs/events.md, and compares the result
// with the live cluster for every resource routed to the sink.
func Run(ctx context.Context, opt Options) (*Report, error) {
	cfg := opt.Config
	sc, ok := cfg.Sink(opt.Sink)
	if !ok {
		return nil, fmt.Errorf("verify: no sink named %q in the config", opt.Sink)
	}
	dyn, err := dynamic.NewForConfig(opt.REST)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(opt.REST)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	type target struct {
		cfg config.Resource
		res *informer.Resource
	}
	var targets []target
	for _, rc := range cfg.Resources {
		if !slices.Contains(rc.Sinks, sc.Name) {
			continue
		}
		gvr := rc.GVR()
		gvk, err := mapper.KindFor(gvr)
		if err != nil {
			return nil, fmt.Errorf("verify: resolve %s: %w", gvr, err)
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("verify: resolve %s: %w", gvr, err)
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		targets = append(targets, target{rc, informer.NewResource(cfg.Cluster, gvr, gvk.Kind, namespaced)})
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("verify: no resource is routed to sink %q", sc.Name)
	}

	rep := &Report{Sink: sc.Name}
	reader, ok := sc.Block.(sinks.Reader)
	if !ok {
		return nil, fmt.Errorf("verify: a %s sink keeps nothing to read back", sc.Type)
	}
	view, err := readBack(ctx, reader, cfg.Routes(sc.Name), rep)
	if err != nil {
		return nil, fmt.Errorf("verify: reading sink %s: %w", sc.Name, err)
	}
	rep.OrderViolations = view.Problems
	rep.Duplicates = view.Duplicates
	rep.Replays = view.Replays
	rep.Gaps = view.Gaps

	for _, t := range targets {
		judge, err := informer.NewJudge(t.cfg)
		if err != nil {
			return nil, fmt.Errorf("verify: %s: %w", t.res.KeyPrefix, err)
		}
		rr := ResourceReport{Name: t.res.KeyPrefix, InView: len(view.Objects(t.res.KeyPrefix))}
		if !judge.Verifiable {
			rr.Skipped = "keys are involved objects (keyBy), not the objects themselves"
			rep.Resources = append(rep.Resources, rr)
			continue
		}
		truth, err := listTruth(ctx, dyn, t.cfg, t.res, judge)
		if err != nil {
			return nil, err
		}
		rr.InCluster = len(truth)
		rr.Divergent = view.Compare(t.res.KeyPrefix, truth)
		rep.Resources = append(rep.Resources, rr)
	}
	sort.Slice(rep.Resources, func(i, j int) bool { return rep.Resources[i].Name < rep.Resources[j].Name })
	return rep, nil
}

// readBack reads the sink's stream into one view, applying the consumer's
// rule across its partitions: after a topic grew, a key's events are in
// two of them, and only one view can keep the newest version of each key.
func readBack(ctx context.Context, r sinks.Reader, routes []config.Route, rep *Report) (*View, error) {
	v := NewView()
	err := r.ReadBack(ctx, routes, func(rec sinks.Record) error {
		if rec.Event == nil {
			rep.Tombstones++
			v.DeleteIn(rec.Partition, rec.Key)
			return nil
		}
		rep.Events++
		v.ApplyIn(rec.Partition, rec.Event)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// listTruth lists what kubewire is configured to stream of one resource:
// same namespaces, selectors and filter, keyed like the events, and judged
// by the resource's suppression rules.
func listTruth(ctx context.Context, dyn dynamic.Interface, rc config.Resource, res *informer.Resource, judge *informer.Judge) (map[string]Truth, error) {
	ns := metav1.NamespaceAll
	if res.Namespaced && len(rc.Namespaces) == 1 {
		ns = rc.Namespaces[0]
	}
	truth := map[string]Truth{}
	opts := metav1.ListOptions{LabelSelector: rc.LabelSelector, FieldSelector: rc.FieldSelector, Limit: 500}
	for {
		l, err := dyn.Resource(res.GVR).Namespace(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("verify: list %s: %w", res.KeyPrefix, err)
		}
		for i := range l.Items {
			u := &l.Items[i]
			if res.Namespaced && len(rc.Namespaces) > 1 && !slices.Contains(rc.Namespaces, u.GetNamespace()) {
				continue
			}
			live, ok := judge.Want(u)
			if !ok {
				continue
			}
			truth[res.ObjectKey(u.GetNamespace(), u.GetName())] = Truth{
				ResourceVersion: u.GetResourceVersion(),
				Same:            func(o Object) bool { return judge.Same(o.ResourceVersion, streamed(rc, o), live) },
			}
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return truth, nil
		}
	}
}

// streamed returns the object's data in the shape its resource's payload
// mode streams, which is what Judge.Same reads: the view holds the object
// itself, and in payload mode diff the stream wraps it.
func streamed(rc config.Resource, o Object) []byte {
	if rc.Payload != shape.PayloadDiff {
		return o.Data
	}
	return append(append([]byte(`{"object":`), o.Data...), '}')
}
