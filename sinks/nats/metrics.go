package nats

import "github.com/prometheus/client_golang/prometheus"

// NATS-specific collectors. The generic ones (published, retries, healthy)
// live in internal/base/metrics and are kept by the dispatcher; these say why a NATS
// sink is struggling.
var (
	// mPublishErrors counts messages whose publish failed, by reason:
	// timeout, disconnected, buffer_full (core reconnect buffer), too_large,
	// no_stream, api (any other JetStream error) and other.
	mPublishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_nats_publish_errors_total",
		Help: "NATS publishes that failed, by sink and reason. The dispatcher retries them unless the reason is too_large.",
	}, []string{"sink", "reason"})

	// mDuplicates counts PubAcks that report the message as a duplicate:
	// a retry repeated an event the stream already held, and the server
	// dropped it by its Nats-Msg-Id.
	mDuplicates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_nats_duplicates_total",
		Help: "JetStream publishes acknowledged as duplicates (dropped by Nats-Msg-Id), by sink.",
	}, []string{"sink"})

	// mConnectionEvents counts connection state changes: disconnected,
	// reconnected, closed.
	mConnectionEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_nats_connection_events_total",
		Help: "NATS connection state changes (disconnected, reconnected, closed), by sink.",
	}, []string{"sink", "event"})

	// mPendingAcks is the number of JetStream publishes awaiting a PubAck.
	mPendingAcks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubewire_nats_pending_acks",
		Help: "JetStream publishes awaiting their PubAck, by sink.",
	}, []string{"sink"})

	// mOversized counts events too large for the server's max_payload or
	// the stream's max_msg_size, by what happened next: reference (sent
	// again as a reference event) or dropped (even the reference was too
	// large).
	mOversized = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_nats_oversized_events_total",
		Help: "Events too large for NATS, by sink and action (reference: sent as a reference event; dropped).",
	}, []string{"sink", "action"})
)

// Collectors lists the NATS sink's own collectors; the registry of sink
// types registers them (sinks.NewRegistry).
func (*Config) Collectors() []prometheus.Collector {
	return []prometheus.Collector{mPublishErrors, mDuplicates, mConnectionEvents, mPendingAcks, mOversized}
}
