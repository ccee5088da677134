package metrics

import "github.com/prometheus/client_golang/prometheus"

// The metrics of resuming a watch from its checkpoint, and of the gaps
// declared when that is not possible (docs/events.md, "Gaps").
var (
	// ResumeTotal counts the starts of a watch stream from a checkpoint:
	// result "resumed" when every change after it came through, "gap" when
	// a gap event was declared instead.
	ResumeTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_resume_total",
		Help: "Watch streams started from a saved checkpoint, by resource and result (resumed, or gap when versions were declared lost).",
	}, []string{"resource", "result"})

	// Gaps counts gap events: ranges of versions declared lost, at start or
	// while running.
	Gaps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_gaps_total",
		Help: "Gap events emitted: ranges of resourceVersions that may hold changes no event carries, by resource and reason.",
	}, []string{"resource", "reason"})

	// GapRevisions adds up the widths of the declared ranges, in etcd
	// revisions. Revisions are shared by every resource of the cluster, so
	// this is an upper bound on the versions of the resource that were lost.
	GapRevisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_gap_revisions_total",
		Help: "Width of the declared gaps in resourceVersions (etcd revisions), an upper bound on the versions lost, by resource.",
	}, []string{"resource"})

	// WatchRefused counts the watches refused at the version an exact LIST
	// had just served (the API server's watch cache starts after it: every
	// API server restart, or a pod away longer than the cache's window).
	// Each is followed by a LIST of what is there now and a gap event.
	WatchRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_watch_refused_total",
		Help: "Watches refused at the version kubewire had reached (410 from the watch cache), each followed by a fresh list and a gap event, by resource and reason.",
	}, []string{"resource", "reason"})

	// CheckpointAge is how long ago the checkpoint of a watch stream last
	// advanced. It grows while a sink holds an early change back.
	CheckpointAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_checkpoint_age_seconds",
		Help: "Seconds since the checkpoint of a resource's watch stream last advanced.",
	}, []string{"resource"})

	// CheckpointWrites counts writes of the checkpoint object, by result.
	CheckpointWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_checkpoint_writes_total",
		Help: "Writes of the checkpoint ConfigMap, by result (ok, conflict, error).",
	}, []string{"result"})
)

func init() {
	register(ResumeTotal, Gaps, GapRevisions, WatchRefused, CheckpointAge, CheckpointWrites)
}
