package app

import (
	"slices"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
)

// Readiness is what /readyz reports: whether kubewire is ready and, if not,
// each reason.
type Readiness struct {
	Ready bool `json:"ready"`
	// Resources lists each resource that holds readiness: not yet synced,
	// with the watcher's state (not_served, forbidden, syncing, ...).
	Resources []ResourceReadiness `json:"resources,omitempty"`
	// Sinks lists each sink that is not healthy, with its state
	// (connecting, disconnected, failing).
	Sinks []SinkReadiness `json:"sinks,omitempty"`
	// OptionalNotServed lists the optional resources the cluster does not
	// serve. They do not hold readiness; they are named so that a missing
	// CRD is visible here too.
	OptionalNotServed []string `json:"optionalNotServed,omitempty"`
	// Discovery is "pending" until discover entries have been read
	// against the cluster's discovery once; it holds readiness.
	Discovery string `json:"discovery,omitempty"`
	// DiscoveryFailed lists the group versions that discovery could not
	// read (an aggregated API whose Service is missing): their resources
	// are not streamed, the rest is. It does not hold readiness, and is
	// reported even when ready.
	DiscoveryFailed []string `json:"discoveryFailed,omitempty"`
	// Unavailable lists discovered resources gone from discovery though
	// not removed; they resume when they come back, and do not hold
	// readiness.
	Unavailable []string `json:"unavailable,omitempty"`
	// DiscoveredForbidden lists discovered resources that kubewire may not
	// list or watch. A discover entry selects whatever the cluster serves,
	// so one resource without a grant must not hold the pod back: they
	// are retried, and do not hold readiness.
	DiscoveredForbidden []string `json:"discoveredForbidden,omitempty"`
}

// ResourceReadiness is one resource that is not synced.
type ResourceReadiness struct {
	Resource string         `json:"resource"`
	State    informer.State `json:"state"`
}

// SinkReadiness is one sink that is not healthy.
type SinkReadiness struct {
	Sink  string               `json:"sink"`
	State dispatch.HealthState `json:"state"`
}

// Readiness reports whether every informer has synced and every sink is
// healthy, and names each one that is not. An optional resource that the
// cluster does not serve does not hold readiness.
func (a *App) Readiness() Readiness {
	var r Readiness
	ws := a.watchers
	if a.disc != nil {
		ready, failed, unavailable := a.disc.status()
		if !ready {
			r.Discovery = "pending"
		}
		r.DiscoveryFailed, r.Unavailable = failed, unavailable
		all, running, _ := a.disc.watchers()
		for _, w := range all {
			switch {
			case !running[w.Name()]:
			case !w.HasSynced() && w.State() == informer.StateForbidden:
				r.DiscoveredForbidden = append(r.DiscoveredForbidden, w.Name())
			default:
				ws = append(slices.Clip(ws), w)
			}
		}
	}
	for _, w := range ws {
		if w.HasSynced() {
			continue
		}
		st := w.State()
		if w.Optional() && st == informer.StateNotServed {
			r.OptionalNotServed = append(r.OptionalNotServed, w.Name())
			continue
		}
		r.Resources = append(r.Resources, ResourceReadiness{Resource: w.Name(), State: st})
	}
	names := make([]string, 0, len(a.dispatchers))
	for name := range a.dispatchers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if st := a.dispatchers[name].Health(); st != dispatch.HealthOK {
			r.Sinks = append(r.Sinks, SinkReadiness{Sink: name, State: st})
		}
	}
	r.Ready = len(r.Resources) == 0 && len(r.Sinks) == 0 && r.Discovery == ""
	return r
}

// Ready reports whether every informer has synced (but for optional
// resources the cluster does not serve) and every sink is healthy.
func (a *App) Ready() bool { return a.Readiness().Ready }
