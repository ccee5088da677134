// Package metrics holds kubewire's Prometheus collectors. Labels are bounded:
// resource, sink, type and reason, never an object's name.
package metrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry is the registry kubewire serves. A package-level registry keeps the
// collectors reachable from every package without threading it through each
// constructor; tests read it through testutil.
var Registry = prometheus.NewRegistry()

// registered lists every collector put in Registry, in order, so that a
// test can describe them all: a vector has no series, and so does not show
// in Registry.Gather, until its first label values are used.
var (
	registeredMu sync.Mutex
	registered   []prometheus.Collector
)

// register adds cs to Registry and to registered. Every collector of this
// package goes through it, never Registry.MustRegister directly.
func register(cs ...prometheus.Collector) { Register(cs...) }

// Register adds the collectors of a sink type (see sinks.Spec) to Registry.
// A collector already registered is left as it is, so that every registry
// of sink types may register its types' collectors; a different collector
// under a name already taken panics, as prometheus.MustRegister does.
func Register(cs ...prometheus.Collector) {
	registeredMu.Lock()
	defer registeredMu.Unlock()
	for _, c := range cs {
		if err := Registry.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) && are.ExistingCollector == c {
				continue
			}
			panic(err)
		}
		registered = append(registered, c)
	}
}

// Registered lists every collector in Registry, in the order registered.
func Registered() []prometheus.Collector {
	registeredMu.Lock()
	defer registeredMu.Unlock()
	return append([]prometheus.Collector(nil), registered...)
}

var (
	// EventsObserved counts changes the listeners produced, per resource and op.
	EventsObserved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_events_observed_total",
		Help: "Changes observed by the informers, by resource and type.",
	}, []string{"resource", "type"})

	// EventsPublished counts events a broker acknowledged.
	EventsPublished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_events_published_total",
		Help: "Events acknowledged by a sink, by resource and type.",
	}, []string{"sink", "resource", "type"})

	// EventsFailed counts events given up on: they could not be encoded, or
	// the broker refused them permanently.
	EventsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_events_failed_total",
		Help: "Events dropped after a permanent failure, by sink, resource, type and reason.",
	}, []string{"sink", "resource", "type", "reason"})

	// EventsConflated counts queued events replaced by a newer state of the
	// same object because the buffer was full.
	EventsConflated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_events_conflated_total",
		Help: "Queued events folded into a newer event of the same object because the sink's buffer was full, by resource and type.",
	}, []string{"sink", "resource", "type"})

	// WriteRetries counts failed sink writes that will be retried.
	WriteRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_sink_write_retries_total",
		Help: "Sink writes that failed and will be retried.",
	}, []string{"sink"})

	// BufferEvents is the number of events queued per sink.
	BufferEvents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_buffer_events",
		Help: "Events queued for a sink and not yet acknowledged.",
	}, []string{"sink"})

	// BufferBytes is the size of queued event data per sink (objects on the
	// raw cache; see dispatch.bufferBytes).
	BufferBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_buffer_bytes",
		Help: "Bytes of event data queued for a sink and not yet acknowledged (raw-cached objects).",
	}, []string{"sink"})

	// SinkHealthy is 1 while a sink's last write succeeded.
	SinkHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_sink_healthy",
		Help: "1 if the sink is connected and its last write succeeded, else 0.",
	}, []string{"sink"})

	// InformerErrors counts list/watch failures by reason (forbidden,
	// not_found, other).
	InformerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_informer_errors_total",
		Help: "List or watch failures, by resource and reason.",
	}, []string{"resource", "reason"})

	// InformerSynced is 1 once a resource's initial list is in the cache.
	InformerSynced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_informer_synced",
		Help: "1 once the resource's informer has synced its initial list.",
	}, []string{"resource"})

	// LastEventTimestamp is when a resource's informer last observed a live
	// change (added, updated or deleted; snapshot records do not count), in
	// seconds since the epoch. `time() - kubewire_last_event_timestamp_seconds`
	// is how stale a resource's stream is; the series is absent until the
	// first change.
	LastEventTimestamp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_last_event_timestamp_seconds",
		Help: "Unix time at which the informer last observed a change (added, updated, deleted) of the resource.",
	}, []string{"resource"})

	// SnapshotRecords counts records of completed snapshots.
	SnapshotRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_snapshot_records_total",
		Help: "Records enqueued by snapshots, by resource.",
	}, []string{"resource"})
)

func init() {
	register(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		EventsObserved, EventsPublished, EventsFailed, EventsConflated, WriteRetries,
		BufferEvents, BufferBytes, SinkHealthy, InformerErrors, InformerSynced, LastEventTimestamp, SnapshotRecords,
	)
}

// IsLeader is 1 while this replica holds the leader lease (always 1 without
// leader election).
var IsLeader = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "kubewire_is_leader",
	Help: "1 while this replica is the leader and publishes.",
})

func init() { register(IsLeader) }

var (
	// PublishDuration is how long one Sink.Write took, success or not.
	PublishDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_publish_duration_seconds",
		Help:    "Duration of one write of a batch to a sink, until the broker acknowledged or refused it.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"sink"})

	// EventLag is the time from kubewire observing a change to the broker
	// acknowledging its event: the end-to-end delay a consumer sees, minus
	// the apiserver's own.
	EventLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_event_lag_seconds",
		Help:    "Time from observing a change to the sink acknowledging its event.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	}, []string{"sink"})

	// SnapshotDuration is how long enqueueing a snapshot took, from its
	// started marker to its completed marker.
	SnapshotDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_snapshot_duration_seconds",
		Help:    "Time to enqueue one snapshot of a resource, from started to completed marker.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"resource"})

	// SnapshotsDeferred counts periodic snapshots skipped because the
	// previous one of the resource was not yet written to every sink.
	SnapshotsDeferred = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_snapshots_deferred_total",
		Help: "Periodic snapshots skipped because the previous snapshot of the resource was still waiting for a sink, by resource.",
	}, []string{"resource"})

	// SnapshotLastRecords is the record count of a resource's last
	// snapshot (a count, not bytes; hence no _size).
	SnapshotLastRecords = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_snapshot_records",
		Help: "Records in the last snapshot of a resource.",
	}, []string{"resource"})

	// SnapshotSize is SnapshotLastRecords under its old name, kept and
	// updated for one release so that dashboards can move over.
	//
	// Deprecated: use SnapshotLastRecords (kubewire_snapshot_records); this
	// goes away in the next release.
	SnapshotSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_snapshot_size",
		Help: "Deprecated: use kubewire_snapshot_records; removed in the next release. Records in the last snapshot of a resource.",
	}, []string{"resource"})
)

func init() {
	register(PublishDuration, EventLag, SnapshotDuration, SnapshotsDeferred, SnapshotLastRecords, SnapshotSize)
}

// Sum adds up every series of the named metric whose labels include match,
// for tests and tools that care about a total rather than one series.
func Sum(name string, match map[string]string) float64 {
	mfs, err := Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range match {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			}
		}
	}
	return total
}

var (
	// DiscoveryFailed is 1 for each group version that discovery could not
	// read the last time it ran (an aggregated API whose Service is gone,
	// say): its resources are not streamed, the others are.
	DiscoveryFailed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_discovery_failed",
		Help: "1 for each group version that the last discovery could not read; its resources are not streamed while it fails.",
	}, []string{"group_version"})

	// DiscoveredResources is how many resources discover entries stream.
	DiscoveredResources = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubewire_discovered_resources",
		Help: "Resources streamed because a discover entry selected them.",
	})

	// ResourceUnavailable is 1 while a discovered resource is gone from
	// discovery but its CustomResourceDefinition still exists (a version no
	// longer served, an aggregated API down): no delete, it resumes when
	// it comes back.
	ResourceUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_resource_unavailable",
		Help: "1 while a discovered resource is missing from discovery though it was not removed; it resumes from its checkpoint when it returns.",
	}, []string{"resource"})
)

func init() { register(DiscoveryFailed, DiscoveredResources, ResourceUnavailable) }
