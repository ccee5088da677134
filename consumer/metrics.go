package consumer

import "github.com/prometheus/client_golang/prometheus"

// WatchGapsTotal counts the watch.gap events Views handled (each gap once
// per View), by resource (its partition key) and reason. The package does
// not register it: a program that exports metrics registers it with its
// registry, e.g. prometheus.MustRegister(consumer.WatchGapsTotal).
var WatchGapsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubewire_consumer_watch_gaps_total",
	Help: "watch.gap events read: kubewire could not resume a watch, and changes in the gap's range of resourceVersions may be missing from the stream.",
}, []string{"resource", "reason"})
