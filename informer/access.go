package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/metrics"
)

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

// checkAccessIn asks once per resource and watch stream, whether watch is
// permitted: with 100+ discovered resources every review is a request the
// apiserver pays at each start. watch rather than list: a missing watch
// would show only after a full LIST, and again after every relist the
// failing watch causes, while a missing list fails the LIST at once and
// cheaply, and the informer reports it (watchError).
func (w *Watcher) checkAccessIn(ctx context.Context, ns string, attempt int) error {
	const verb = "watch"
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

// watchError replaces the reflector's default logging with one line that
// says what is wrong and a metric. The reflector keeps retrying by itself.
func (w *Watcher) watchError(ctx context.Context, _ *cache.Reflector, err error) {
	var reason string
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		reason = "expired"
		w.log.Info("watch expired; relisting", "err", err)
	case apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		reason = "too-large"
		w.log.Warn("the cluster's history is behind the stream (etcd restored from a backup?); relisting", "err", err)
	case apierrors.IsForbidden(err):
		reason = "forbidden"
		if !w.synced.Load() {
			// Refused its list (checkAccessIn asked about watch only): it
			// must not hold readiness, as a refused watch does not.
			w.setState(StateForbidden)
		}
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
