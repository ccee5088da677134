package kafka

import (
	"bytes"
	"time"

	kafkago "github.com/segmentio/kafka-go"

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
)
