package kafka

import "github.com/prometheus/client_golang/prometheus"

// Kafka-specific collectors. The generic ones (published, retries, healthy)
// live in internal/base/metrics and are kept by the dispatcher; these say what the
// Kafka sink did on the wire and why it struggles.
var (
	// mProduceRequests counts produce requests by outcome: ok, or the
	// Kafka error name (e.g. not_leader_or_follower, message_too_large), or
	// network for a request whose answer never came.
	mProduceRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_produce_requests_total",
		Help: "Kafka produce requests, by sink and outcome (ok, a Kafka error name, or network).",
	}, []string{"sink", "outcome"})

	// mRecords counts records acknowledged by kind: event, tombstone,
	// marker (one per partition a snapshot marker is copied to).
	mRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_records_total",
		Help: "Kafka records acknowledged, by sink and kind (event, tombstone, marker).",
	}, []string{"sink", "kind"})

	// mOversized counts events the broker refused as too large, by what
	// happened next: reference (sent again with a reference payload) or
	// dropped (even the reference was refused).
	mOversized = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_oversized_events_total",
		Help: "Events refused by Kafka as too large, by sink and action (reference: sent with a reference payload; dropped).",
	}, []string{"sink", "action"})

	// mBatchRecords observes how many records each produce request
	// carried: whether linger and batch limits do what was intended.
	mBatchRecords = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_kafka_batch_records",
		Help:    "Records per Kafka produce request, by sink.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 7),
	}, []string{"sink"})

	// mProduceResends counts produce requests sent again, byte for
	// byte with the same producer id, epoch and sequence, because an
	// earlier copy's fate is unknown (its answer never came, or allows it
	// to be in the log) or the broker asked for a retry. The broker
	// appends such a request once, however many copies it gets.
	mProduceResends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_produce_resends_total",
		Help: "Kafka produce requests resent unchanged, for the broker to deduplicate, while an earlier copy's fate was unknown or the broker asked for a retry, by sink.",
	}, []string{"sink"})

	// mSequenceErrors counts batches the broker refused because their
	// sequence did not follow what it holds of the producer:
	// out_of_order_sequence_number or unknown_producer_id. Either can mean
	// that the broker lost records it had acknowledged.
	mSequenceErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_producer_sequence_errors_total",
		Help: "Kafka batches refused for their idempotent producer sequence (possible data loss on the broker), by sink and error.",
	}, []string{"sink", "error"})

	// mPossibleDuplicates counts records that may be in their partition
	// twice, by why: each is sent again as a new record, or will be by the
	// next process, while an earlier copy may be in the log. The reasons
	// are the only ways this happens (docs/sinks/kafka.md):
	// refused_after_doubt, fenced and sequence_error (an idempotent batch
	// in doubt that could not go out again unchanged), not_idempotent (a
	// request in doubt without the idempotent producer) and closed (the
	// sink closed with a batch in doubt, or with records of events that
	// failed after their partition acknowledged them).
	mPossibleDuplicates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubewire_kafka_possible_duplicates_total",
		Help: "Kafka records that may be in their partition twice (same CloudEvent id), by sink and reason (refused_after_doubt, fenced, sequence_error, not_idempotent, closed).",
	}, []string{"sink", "reason"})

	// mProduceDuration observes produce round trips, named like the
	// other duration histograms (_duration_seconds).
	mProduceDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_kafka_produce_duration_seconds",
		Help:    "Duration of Kafka produce round trips, by sink.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	}, []string{"sink"})

	// mProduceSeconds is mProduceDuration under its old name, kept
	// and observed for one release so that dashboards can move over.
	//
	// Deprecated: use mProduceDuration
	// (kubewire_kafka_produce_duration_seconds); this goes away in the next
	// release.
	mProduceSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubewire_kafka_produce_seconds",
		Help:    "Deprecated: use kubewire_kafka_produce_duration_seconds; removed in the next release. Duration of Kafka produce round trips, by sink.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	}, []string{"sink"})
)

// series are the series of one sink that move on every produce request,
// looked up once (see Sink.series) rather than by label on every request.
type series struct {
	produceOK                    prometheus.Counter
	batchRecords                 prometheus.Observer
	duration, durationDeprecated prometheus.Observer
	events, tombstones, markers  prometheus.Counter
}

func newSeries(sink string) *series {
	return &series{
		produceOK:          mProduceRequests.WithLabelValues(sink, "ok"),
		batchRecords:       mBatchRecords.WithLabelValues(sink),
		duration:           mProduceDuration.WithLabelValues(sink),
		durationDeprecated: mProduceSeconds.WithLabelValues(sink),
		events:             mRecords.WithLabelValues(sink, kindEvent),
		tombstones:         mRecords.WithLabelValues(sink, kindTombstone),
		markers:            mRecords.WithLabelValues(sink, kindMarker),
	}
}

// observeProduce records one produce round trip under both the current
// and the deprecated histogram name.
func (m *series) observeProduce(seconds float64) {
	m.duration.Observe(seconds)
	m.durationDeprecated.Observe(seconds)
}

// Collectors lists the Kafka sink's own collectors; the registry of sink
// types registers them (sinks.NewRegistry).
func (*Config) Collectors() []prometheus.Collector {
	return []prometheus.Collector{mProduceRequests, mRecords, mOversized, mBatchRecords, mProduceDuration, mProduceSeconds,
		mProduceResends, mSequenceErrors, mPossibleDuplicates}
}

// Why a record may be in its partition twice (mPossibleDuplicates).
const (
	dupRefusedAfterDoubt = "refused_after_doubt"
	dupFenced            = "fenced"
	dupSequenceError     = "sequence_error"
	dupNotIdempotent     = "not_idempotent"
	dupClosed            = "closed"
)

// possibleDuplicates counts n records that may be in their partition
// twice. It is not on the path of a request that succeeds.
func (s *Sink) possibleDuplicates(reason string, n int) {
	if n > 0 {
		mPossibleDuplicates.WithLabelValues(s.name, reason).Add(float64(n))
	}
}

// series returns the sink's per-request series.
func (s *Sink) series() *series {
	s.seriesOnce.Do(func() { s.m = newSeries(s.name) })
	return s.m
}
