package metrics

import "github.com/prometheus/client_golang/prometheus"

// The disk spool of a sink with overflow: spool (dispatch/spool).
var (
	SpoolBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_spool_bytes",
		Help: "Bytes of events waiting in a sink's disk spool.",
	}, []string{"sink"})
	SpoolEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_spool_events",
		Help: "Events waiting in a sink's disk spool, or on their way into it.",
	}, []string{"sink"})
	// SpoolFull is the alert: while it is 1, new changes of an object are
	// folded into its newest queued state (kubewire_events_conflated_total).
	SpoolFull = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_spool_full",
		Help: "1 while a sink's disk spool is at spool.maxBytes and changes are being conflated.",
	}, []string{"sink"})
	SpoolWritten = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_spool_written_total",
		Help: "Events written to a sink's disk spool.",
	}, []string{"sink"})
	SpoolErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_spool_errors_total",
		Help: "Failures to write to or read from a sink's disk spool, by operation.",
	}, []string{"sink", "op"})
)

// ResourceBlocked is 1 while a resource's writes to a sink fail, for
// instance because its topic or stream does not exist. Its events wait in
// its own lane (and spool) while the sink's other resources go on.
var ResourceBlocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubewire_resource_blocked",
	Help: "1 while writes of a resource's events to a sink fail; they wait, and other resources go on.",
}, []string{"sink", "resource"})

func init() {
	register(SpoolBytes, SpoolEvents, SpoolFull, SpoolWritten, SpoolErrors, ResourceBlocked)
}
