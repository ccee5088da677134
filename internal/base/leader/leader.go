// Package leader runs kubewire under client-go leader election, so that with
// several replicas exactly one publishes.
//
// Standbys do not run informers. A standby that becomes leader starts them
// from the checkpoint the old leader saved (internal/base/checkpoint): one LIST
// per resource at the checkpoint's version loads its cache, and its watches
// deliver every change after it, so nothing the old leader had not
// delivered is lost. Where the checkpoint is too old for the apiserver, it
// declares a gap and sends a snapshot. The price is a cold start on failover
// instead of twice the apiserver watches and cache memory all the time.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kubewire/kubewire/internal/base/metrics"
)

// Config configures the election.
type Config struct {
	// LeaseName and Namespace locate the coordination.k8s.io Lease.
	LeaseName, Namespace string
	// Identity names this replica in the Lease; default hostname_uuid.
	Identity                                  string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ErrLost is returned when leadership was lost without being given up: the
// process must stop publishing at once, because another replica may
// already have taken over.
var ErrLost = errors.New("leader election lost")

// Run blocks until ctx ends. While this replica holds the lease it runs lead
// with a context that ends when ctx does; lead must drain before returning.
// The lease is released only after lead has returned, so a successor never
// publishes while this replica is still draining.
func Run(ctx context.Context, rc *rest.Config, cfg Config, log *slog.Logger, lead func(context.Context)) error {
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = host + "_" + string(uuid.NewUUID())
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.LeaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}

	// The elector's context outlives ctx until lead has drained.
	electorCtx, stopElector := context.WithCancel(context.Background())
	defer stopElector()
	var lost error
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				setLeading(true)
				log.Info("became leader; starting informers", "lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.Identity)
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				go func() {
					select {
					case <-ctx.Done():
						cancel()
					case <-runCtx.Done():
					}
				}()
				lead(runCtx)
				// Drained: now the elector may release the lease.
				stopElector()
			},
			OnStoppedLeading: func() {
				setLeading(false)
				if ctx.Err() == nil && electorCtx.Err() == nil {
					lost = ErrLost
				}
			},
			OnNewLeader: func(identity string) {
				if identity != cfg.Identity {
					log.Info("standing by", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	setLeading(false)
	go func() {
		// A standby has nothing to drain: stop competing on the signal. A
		// leader stops the elector itself once it has drained.
		select {
		case <-ctx.Done():
			if !le.IsLeader() {
				stopElector()
			}
		case <-electorCtx.Done():
		}
	}()
	le.Run(electorCtx)
	return lost
}

var leading atomic.Bool

func setLeading(v bool) {
	leading.Store(v)
	if v {
		metrics.IsLeader.Set(1)
	} else {
		metrics.IsLeader.Set(0)
	}
}

// IsLeader reports whether this process currently leads, for readiness: a
// standby is healthy without synced informers.
func IsLeader() bool { return leading.Load() }
