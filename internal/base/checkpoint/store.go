// Package checkpoint keeps the checkpoints of kubewire's watch streams in a
// Lease, so that a restart, a new pod or a new leader resumes each watch
// where the last one had delivered everything.
//
// The Lease lives in kubewire's own namespace, beside the leader election's,
// and holds the checkpoints as JSON in one annotation (AnnotationKey): a map
// from each resource's name ("configmaps", "widgets.example.com") to its
// Entry. A Lease rather than a ConfigMap because kubewire must not watch the
// object it writes (each write would be a change to stream, and streaming it
// a reason to write again), and a config that streams ConfigMaps is common,
// one that streams Leases is not.
//
// Any checkpoint a kubewire wrote is a safe place to resume from: every
// change up to it was delivered. So writes are plain conditional updates,
// and when two writers meet (an old leader still draining while the new
// one starts), whichever writes last wins; the other one's next write, or
// the next start, resumes a little earlier and repeats a few changes, which
// the event ids let consumers drop.
package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tick"
)

// Entry is the checkpoint of one resource.
type Entry struct {
	// Hash is the resource's config hash (config.Resource.Hash) when the
	// checkpoint was written.
	Hash string `json:"hash"`
	// Streams maps each watch stream ("" for one watch of the resource,
	// else a namespace) to its checkpoint resourceVersion.
	Streams map[string]string `json:"streams"`
	// UID is, for a resource found by discovery that a
	// CustomResourceDefinition defines, the CRD's uid: a CRD deleted and
	// created again under the same name is another resource, whose
	// stream must not resume from this one.
	UID string `json:"uid,omitempty"`
	// Settled is, per stream, where the checkpoint was before bookmarks
	// alone moved it on (informer.Watcher.SettledCheckpoint). It is not
	// stored: Run uses it to write a checkpoint that moved only because
	// its streams were idle at most every IdleEvery.
	Settled map[string]string `json:"-"`
}

// IdleEvery is how often Run writes a checkpoint whose only moves are
// bookmarks. The apiserver bookmarks each watch about once a minute with
// the cluster's newest version, so with 100+ resources some stream moves
// nearly every second though nothing changes: written at once, that is a
// Lease write a second for nothing. Such a move repeats no change if it is
// lost, and an idle resource's older checkpoint still resumes, because
// the watch cache keeps its history until changes push it out, and a
// change is written at once.
const IdleEvery = time.Minute

// AnnotationKey is the Lease annotation that holds the checkpoints.
const AnnotationKey = "kubewire.io/checkpoint"

// Store reads and writes the checkpoint Lease.
type Store struct {
	leases    clientFor
	namespace string
	name      string
	log       *slog.Logger

	// rv is the Lease's resourceVersion as last read or written, "" if it
	// does not exist; data is what it holds.
	rv   string
	data map[string]Entry
	// written is when Save last wrote the Lease.
	written time.Time
	// forget names entries to drop (Forget); Save runs on the saver's
	// goroutine, Forget on the discoverer's.
	forgetMu sync.Mutex
	forget   []string
}

type clientFor interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// New returns the Store of the Lease namespace/name.
func New(rc *rest.Config, namespace, name string, log *slog.Logger) (*Store, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint client: %w", err)
	}
	return &Store{leases: cs.CoordinationV1().Leases(namespace), namespace: namespace, name: name, log: log}, nil
}

// Name is "namespace/name", for logs.
func (s *Store) Name() string { return s.namespace + "/" + s.name }

// Load reads the checkpoints; a Lease that does not exist yet holds none.
func (s *Store) Load(ctx context.Context) (map[string]Entry, error) {
	l, err := s.leases.Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.rv, s.data = "", map[string]Entry{}
		return map[string]Entry{}, nil
	case err != nil:
		return nil, fmt.Errorf("reading checkpoint Lease %s: %w", s.Name(), err)
	}
	s.rv, s.data = l.ResourceVersion, map[string]Entry{}
	if v, ok := l.Annotations[AnnotationKey]; ok {
		if err := json.Unmarshal([]byte(v), &s.data); err != nil {
			// Unreadable: every resource starts afresh, as on a first
			// start; the next save writes a readable one.
			s.log.Warn("checkpoint unreadable; every resource starts from a fresh list", "lease", s.Name(), "err", err)
			s.data = map[string]Entry{}
		}
	}
	return maps.Clone(s.data), nil
}

// Forget drops the entries of names at the next Save: their resources
// left the cluster.
func (s *Store) Forget(names ...string) {
	s.forgetMu.Lock()
	defer s.forgetMu.Unlock()
	s.forget = append(s.forget, names...)
}

// Save writes entries over the ones already there (other resources'
// entries stay), if anything changed. It creates the Lease if needed.
func (s *Store) Save(ctx context.Context, entries map[string]Entry) error {
	if s.data == nil {
		if _, err := s.Load(ctx); err != nil {
			return err
		}
	}
	next := maps.Clone(s.data)
	s.forgetMu.Lock()
	for _, n := range s.forget {
		delete(next, n)
	}
	s.forgetMu.Unlock()
	maps.Copy(next, entries)
	if s.rv != "" && maps.EqualFunc(next, s.data, sameEntry) {
		return nil
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.name, Namespace: s.namespace, ResourceVersion: s.rv,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "kubewire", "app.kubernetes.io/component": "checkpoint"},
			Annotations: map[string]string{AnnotationKey: string(b)},
		},
	}
	var out *coordinationv1.Lease
	if s.rv == "" {
		out, err = s.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		out, err = s.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		metrics.CheckpointWrites.WithLabelValues("conflict").Inc()
		// Someone else wrote it: read it again, and write on top at the
		// next turn (see the package comment for why that is safe).
		s.data = nil
		return fmt.Errorf("checkpoint Lease %s changed under us: %w", s.Name(), err)
	case err != nil:
		metrics.CheckpointWrites.WithLabelValues("error").Inc()
		return fmt.Errorf("writing checkpoint Lease %s: %w", s.Name(), err)
	}
	metrics.CheckpointWrites.WithLabelValues("ok").Inc()
	s.rv, s.data, s.written = out.ResourceVersion, next, time.Now()
	return nil
}

// idleOnly reports whether entries differ from what the Lease holds only
// by streams that bookmarks alone moved forward.
func (s *Store) idleOnly(entries map[string]Entry) bool {
	if s.data == nil || s.rv == "" {
		return false
	}
	s.forgetMu.Lock()
	forget := len(s.forget)
	s.forgetMu.Unlock()
	if forget > 0 {
		return false
	}
	for name, e := range entries {
		was, ok := s.data[name]
		if !ok || was.Hash != e.Hash || was.UID != e.UID || len(was.Streams) != len(e.Streams) {
			return false
		}
		for k, rv := range e.Streams {
			old, ok := was.Streams[k]
			switch {
			case !ok:
				return false
			case rv == old:
			case !after(rv, old):
				// Backwards (a restored etcd): not an idle move.
				return false
			case e.Settled[k] == "" || after(e.Settled[k], old):
				return false
			}
		}
	}
	return true
}

// after reports whether resourceVersion a is after b; a version that is
// not a number is never after, so that it is written at once.
func after(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// turn is one of Run's saves, at now.
func (s *Store) turn(ctx context.Context, entries map[string]Entry, now time.Time) error {
	if now.Sub(s.written) < IdleEvery && s.idleOnly(entries) {
		return nil
	}
	return s.Save(ctx, entries)
}

func sameEntry(a, b Entry) bool {
	return a.Hash == b.Hash && a.UID == b.UID && maps.Equal(a.Streams, b.Streams)
}

// Run saves what collect gives every interval until ctx ends, but what
// moved only by bookmarks at most every IdleEvery. Errors are logged, and
// the next turn tries again.
func (s *Store) Run(ctx context.Context, every time.Duration, collect func() map[string]Entry) {
	failing := false
	tick.Every(ctx, every, func() {
		err := s.turn(ctx, collect(), time.Now())
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			s.log.Warn("checkpoint not saved; retrying", "err", err)
			failing = true
		case err == nil && failing:
			s.log.Info("checkpoint saved again", "lease", s.Name())
			failing = false
		}
	})
}
