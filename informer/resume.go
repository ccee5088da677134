package informer

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/internal/base/metrics"
)

// Resume is where a resource's watch streams start after a restart or a
// failover: the checkpoint of each stream, as Watcher.Checkpoint gave it.
type Resume struct {
	// Streams maps each stream ("" for one watch of the resource, else the
	// namespace of a per-namespace watch) to its checkpoint.
	Streams map[string]string
	// Reason, when set, says why the checkpoint must not be resumed
	// (GapConfigChanged): the first list then declares a gap from it.
	Reason string
	// Acked and Hold: when a spool of an earlier process replays before
	// the watch resumes, Streams may be past changes that are only in that
	// spool. The checkpoint then stays at Acked (what every sink had
	// acknowledged) until Hold is closed (the replay is delivered).
	Acked map[string]string
	Hold  <-chan struct{}
}

// resumer makes every list of an informer go on from where its stream
// was, rather than from whatever the apiserver holds now, and declares a
// gap wherever that is not possible.
//
// client-go's reflector lists (at "0", or at the version it last saw) and
// then watches from the list's version. resumer turns that list into a
// LIST at exactly the version the stream reached (resourceVersionMatch
// Exact): it loads the store as it was at that version, and the watch
// that follows delivers every change after it, in order. That holds for
// the first list after a restart (the version is the checkpoint) and for
// a relist after a watch failed (the version is the one the reflector
// reached). Where the apiserver no longer holds that version (410 Gone,
// "too old resource version", or "too large" after an etcd restore), it
// lists what is there now, at S, and queues a gap (from, S] for each
// stream, which the queue hands the handler before the list's own
// notifications.
//
// The reflector runs one list at a time; resumer relies on that.
type resumer struct {
	resource string
	// merged is set when the streams are namespaces watched one by one and
	// merged; positions then gives each namespace's position.
	merged    bool
	positions func() map[string]string
	// stream is the one stream's key when not merged.
	stream string
	// lastSync is the reflector's last synced version, once it runs.
	lastSync func() string

	mu sync.Mutex
	// start is the checkpoint of the first list; nil for a fresh start.
	start  *Resume
	listed bool
	// gaps wait for the Replace of the list that found them.
	gaps []Gap
	// refusal is the gap reason of the last watch's refusal, until the
	// relist that follows it takes it.
	refusal string
	// listedAt is the version of the list just answered, until the watch
	// that follows it starts: that watch needs no behind check.
	listedAt string
	log      *slog.Logger
}

func (r *resumer) wrap(lw cache.ListerWatcher) *cache.ListWatch {
	lwc := lw.(cache.ListerWatcherWithContext)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.list(ctx, lw, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if err := r.behindUnlessJustListed(ctx, lwc, o.ResourceVersion); err != nil {
				r.watchRefused(err)
				return nil, err
			}
			// A watch refused at its start, before any event: the same
			// refusal as an ERROR event on it.
			wi, err := lwc.WatchWithContext(ctx, o)
			if err != nil {
				r.watchRefused(err)
			}
			return wi, err
		},
	}
}

// plan is what one list does: read at exact (if set) and, failing that or
// if reason is already set, read what is there now and declare gaps from
// lower.
type plan struct {
	exact  string
	lower  map[string]string
	reason string
	first  bool
	// refused says the list follows a watch refused at the version the
	// stream reached.
	refused bool
}

func (r *resumer) plan(o metav1.ListOptions) plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.listed {
		if r.start == nil || len(r.start.Streams) == 0 {
			return plan{first: true}
		}
		p := plan{first: true, lower: r.start.Streams, reason: r.start.Reason}
		if p.reason == "" {
			p.exact = oldest(r.start.Streams)
		}
		return p
	}
	refusal := r.refusal
	r.refusal = ""
	var lower map[string]string
	if r.merged {
		lower = r.positions()
	} else {
		lower = map[string]string{r.stream: r.lastSync()}
	}
	switch {
	case o.ResourceVersion == "":
		// The reflector found the version it reached unavailable (a watch
		// or list answered 410) and asks for a fresh read: versions after
		// it may be gone.
		return plan{lower: lower, reason: GapExpired}
	case r.merged:
		// A merged relist reads every namespace at one version, ahead of
		// namespaces whose watch lagged: what they had not delivered is
		// not read again.
		return plan{lower: lower, reason: GapExpired}
	case refusal != "":
		// The watch from the version the reflector reached was refused,
		// and the reflector relists at that version on purpose (it reads
		// "at least as fresh"). With the watch cache on, etcd may still
		// serve a LIST at exactly it while the cache refuses every watch
		// from it: after any API server restart, the new cache starts at
		// the current revision. Listing it again would load the store at a
		// version no watch can go on from, once per backoff, until etcd
		// compacts it. What lies between is lost: read what is there now
		// and declare it.
		return plan{lower: lower, reason: refusal, refused: true}
	default:
		return plan{exact: o.ResourceVersion, lower: lower}
	}
}

// olderThan reports whether version a is below b, compared as numbers
// (etcd revisions); false where either is not a number.
func olderThan(a, b string) bool {
	na, errA := strconv.ParseUint(a, 10, 64)
	nb, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && na < nb
}

// oldest is the smallest of the versions, compared as numbers where they
// are (etcd revisions are), so that every stream's history is read again.
func oldest(rvs map[string]string) string {
	var best string
	var bestN uint64
	for _, rv := range rvs {
		n, err := strconv.ParseUint(rv, 10, 64)
		if best == "" || err == nil && n < bestN {
			best, bestN = rv, n
		}
	}
	return best
}

func (r *resumer) list(ctx context.Context, lw cache.ListerWatcher, o metav1.ListOptions) (runtime.Object, error) {
	lwc := lw.(cache.ListerWatcherWithContext)
	if o.Continue != "" {
		// A later page of a list already planned.
		return lwc.ListWithContext(ctx, o)
	}
	p := r.plan(o)
	reason := p.reason
	if p.refused {
		metrics.WatchRefused.WithLabelValues(r.resource, reason).Inc()
		r.log.Warn("watch refused at the version the stream reached; listing afresh and declaring a gap",
			"from", p.lower[r.stream], "reason", reason)
	}
	if p.exact != "" {
		// A LIST at a version the cluster has not reached waits for it,
		// and client-go retries the answer (504, Retry-After) ten times:
		// 40 s to learn what one small read tells at once.
		if err := r.behind(ctx, lwc, p.exact); err != nil {
			reason = GapTooLarge
		} else {
			eo := o
			eo.ResourceVersion, eo.ResourceVersionMatch = p.exact, metav1.ResourceVersionMatchExact
			l, err := lwc.ListWithContext(ctx, eo)
			if err == nil {
				r.done(p, nil, "")
				r.listedVersion(l)
				return l, nil
			}
			if reason = unavailable(err); reason == "" {
				return nil, err
			}
		}
	}
	if reason != "" {
		// What is there now, read from etcd: the gap ends at its version.
		o.ResourceVersion, o.ResourceVersionMatch = "", ""
	}
	l, err := lwc.ListWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	var gaps []Gap
	if reason != "" {
		to := ""
		if la, err := meta.ListAccessor(l); err == nil {
			to = la.GetResourceVersion()
		}
		keys := make([]string, 0, len(p.lower))
		for ns := range p.lower {
			keys = append(keys, ns)
		}
		slices.Sort(keys)
		for _, ns := range keys {
			if from := p.lower[ns]; from != "" && from != to {
				gaps = append(gaps, Gap{Namespace: ns, From: from, To: to, Reason: reason,
					Backwards: reason == GapTooLarge || olderThan(to, from)})
			}
		}
	}
	r.done(p, gaps, reason)
	r.listedVersion(l)
	return l, nil
}

// behindUnlessJustListed is behind, but for the watch that goes on from
// the list just answered: the cluster itself gave that version a moment
// ago, so its history has reached it, and a second read per resource
// would double the LISTs of every start and relist. A later watch (after
// one ended) gets the check: etcd may have been restored meanwhile.
func (r *resumer) behindUnlessJustListed(ctx context.Context, lw cache.ListerWatcherWithContext, from string) error {
	r.mu.Lock()
	just := r.listedAt != "" && r.listedAt == from
	r.listedAt = ""
	r.mu.Unlock()
	if just {
		return nil
	}
	return r.behind(ctx, lw, from)
}

// listedVersion records the version of a list the apiserver answered.
func (r *resumer) listedVersion(l runtime.Object) {
	la, err := meta.ListAccessor(l)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.listedAt = la.GetResourceVersion()
	r.mu.Unlock()
}

// behind refuses a watch from a version the API server's history has not
// reached, which happens only when etcd was restored from a backup. The
// watch cache accepts such a watch, delivers nothing until the restored
// history passes the version, and then delivers that history's changes as
// if they followed the old one's. So each watch is preceded by the
// cheapest consistent read there is, a LIST of one object, whose version
// is the cluster's current revision. If that read fails, the watch goes
// ahead and meets the same trouble itself.
func (r *resumer) behind(ctx context.Context, lw cache.ListerWatcherWithContext, from string) error {
	if r.merged || from == "" || from == "0" {
		return nil
	}
	l, err := lw.ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil
	}
	la, err := meta.ListAccessor(l)
	if err != nil || !olderThan(la.GetResourceVersion(), from) {
		return nil
	}
	now := la.GetResourceVersion()
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 504, Reason: metav1.StatusReasonTimeout,
		Message: "watch from resourceVersion " + from + ": the cluster's history is at " + now + ", behind it (etcd restored from a backup?)",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}},
	}}
}

// watchRefused is told of every ERROR event a watch receives. The reflector answers a 410 on the watch
// with a relist at the same version and never calls its error handler, so
// the resumer must hear of it here to tell that relist apart from one after
// a watch that merely broke. Merged streams relist afresh anyway.
func (r *resumer) watchRefused(err error) {
	reason := unavailable(err)
	if reason == "" || r.merged {
		return
	}
	r.mu.Lock()
	r.refusal = reason
	r.mu.Unlock()
}

// unavailable is the gap reason of an error that says the version asked
// for is not served, or "" for any other error.
func unavailable(err error) string {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return GapExpired
	case apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return GapTooLarge
	}
	return ""
}

func (r *resumer) done(p plan, gaps []Gap, reason string) {
	r.mu.Lock()
	r.listed = true
	r.gaps = append(r.gaps, gaps...)
	r.mu.Unlock()
	if p.first && p.lower != nil {
		result := "resumed"
		if reason != "" {
			result = "gap"
		}
		metrics.ResumeTotal.WithLabelValues(r.resource, result).Inc()
	}
}

// takeGaps hands the queue the gaps found by the list it applies.
func (r *resumer) takeGaps() []Gap {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gaps
	r.gaps = nil
	return g
}
