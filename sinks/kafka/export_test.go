package kafka

import (
	"bytes"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks"
)

// ProducerState returns the idempotent producer id, epoch and next sequence
// of a partition the sink has produced to.
func ProducerState(s sinks.Sink, topic string, partition int) (id int64, epoch int16, seq int32, ok bool) {
	k := s.(*Sink)
	k.mu.Lock()
	t := k.topics[topic]
	k.mu.Unlock()
	if t == nil {
		return 0, 0, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if partition >= len(t.parts) {
		return 0, 0, 0, false
	}
	// The partition loop is idle between Writes, so reading it here is safe
	// as long as no Write is running.
	p := t.parts[partition].producer
	return p.id, p.epoch, p.seq, p.valid
}

// EncodeIdempotent exposes encodeIdempotent to tests that play a stale
// request.
func EncodeIdempotent(recs []kafkago.Record, id int64, epoch int16, seq int32) ([]byte, error) {
	var buf bytes.Buffer
	return encodeIdempotent(&buf, recs, kafkago.Compression(0), producer{id: id, epoch: epoch, seq: seq, valid: true})
}

// EventBatch writes evs as one idempotent batch as the sink does (binary
// mode, each record's headers written straight from its event), and again
// through kafka-go's encoder with each record's headers built by
// encodeBinary. bound is what the sink sizes the first one's buffer to.
func EventBatch(evs []*encoding.Event) (direct, kafkaGo []byte, bound int, err error) {
	s := &Sink{}
	rs := make([]record, len(evs))
	for i, ev := range evs {
		rs[i] = s.newRecord(ev)
		// Each encoder stamps a record without a time with its own now,
		// which may fall in another millisecond.
		if rs[i].time.IsZero() {
			rs[i].time = time.UnixMilli(1764000000000)
		}
	}
	p := producer{id: 99, epoch: 3, seq: 1000, valid: true}
	bound = batchBound(rs)
	direct = appendBatch(nil, rs, p, time.Now())
	recs := make([]kafkago.Record, len(rs))
	setRecords(recs, make([]payload, 2*len(rs)), rs)
	kafkaGo, err = encodeIdempotent(&bytes.Buffer{}, recs, 0, p)
	return direct, kafkaGo, bound, err
}

// RecordSizes is what batch.maxBytes counts of ev's record, and of the
// tombstone that follows it when ev is a delete.
func RecordSizes(ev *encoding.Event) (event, tombstone int) {
	r := (&Sink{}).newRecord(ev)
	t := record{key: r.key, kind: kindTombstone}
	return r.size(), t.size()
}

// SetProbeInterval sets how often the idle connection probe runs. Call it
// before Connect.
func SetProbeInterval(s sinks.Sink, d time.Duration) { s.(*Sink).probeEvery = d }

// EncodeWithSDK is the encoding through sdk-go's binding package, the
// oracle of the direct binary encoding.
var EncodeWithSDK = encodeWithSDK

// The sink's collectors, for tests that read them.
var (
	Oversized      = mOversized
	ProduceResends = mProduceResends
	SequenceErrors = mSequenceErrors
	PossibleDups   = mPossibleDuplicates
)

// SetStallAfter sets how long a partition's request may be in flight
// before Writes stop waiting for it, until t ends.
func SetStallAfter(t interface{ Cleanup(func()) }, d time.Duration) {
	old := stallAfter
	stallAfter = d
	t.Cleanup(func() { stallAfter = old })
}

// StallAfter is how long a partition's request may be in flight before
// Writes stop waiting for it.
func StallAfter() time.Duration { return stallAfter }
