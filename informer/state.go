package informer

// State says where a Watcher is on its way to streaming, for readiness
// reports that say why a resource is not synced.
type State string

const (
	// StateStarting: Run has not yet resolved the resource.
	StateStarting State = "starting"
	// StateNotServed: the cluster does not serve the resource (its CRD is
	// not installed, say); Run keeps retrying.
	StateNotServed State = "not_served"
	// StateUnresolved: discovery failed for another reason; Run retries.
	StateUnresolved State = "unresolved"
	// StateForbidden: list or watch is not permitted; Run retries.
	StateForbidden State = "forbidden"
	// StateSyncing: the informer runs and its initial list is not yet
	// delivered.
	StateSyncing State = "syncing"
	// StateSynced: the initial list is delivered; changes stream.
	StateSynced State = "synced"
)

// State reports where the watcher is. It is safe to call at any time.
func (w *Watcher) State() State {
	if s, ok := w.state.Load().(State); ok {
		return s
	}
	return StateStarting
}

// Optional reports whether the resource is marked optional: while the
// cluster does not serve it, it does not hold readiness.
func (w *Watcher) Optional() bool { return w.cfg.Optional }

func (w *Watcher) setState(s State) { w.state.Store(s) }

// Sinks are the names of the sinks the resource's events go to.
func (w *Watcher) Sinks() []string { return w.cfg.Sinks }
