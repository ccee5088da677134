package metrics

import "github.com/prometheus/client_golang/prometheus"

// Shaping collectors: what filters and update suppression kept back, so
// that no event disappears without a number going up.
var (
	// EventsFiltered counts changes a resource's CEL filter rejected.
	EventsFiltered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_events_filtered_total",
		Help: "Changes not emitted because the resource's filter yielded false, by resource and type.",
	}, []string{"resource", "type"})

	// FilterErrors counts evaluations that failed at runtime (a missing
	// key, the cost limit). The event is emitted anyway.
	FilterErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_filter_errors_total",
		Help: "Filter evaluations that failed at runtime, by resource; the event was emitted anyway.",
	}, []string{"resource"})

	// UpdatesSuppressed counts updates not emitted because nothing worth
	// sending changed: unchanged, ignored_paths or generation_unchanged.
	UpdatesSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_updates_suppressed_total",
		Help: "Updates not emitted because nothing worth sending changed, by resource and reason.",
	}, []string{"resource", "reason"})
)

func init() {
	register(EventsFiltered, FilterErrors, UpdatesSuppressed)
}
