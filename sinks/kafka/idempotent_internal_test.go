package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

func TestAStampedBatchCarriesTheProducerAndAValidChecksum(t *testing.T) {
	for _, codec := range []kafkago.Compression{0, kafkago.Gzip, kafkago.Snappy, kafkago.Lz4, kafkago.Zstd} {
		recs := []kafkago.Record{
			{Key: kafkago.NewBytes([]byte("a")), Value: kafkago.NewBytes([]byte(`{"n":1}`))},
			{Key: kafkago.NewBytes([]byte("b")), Value: kafkago.NewBytes([]byte(`{"n":2}`)),
				Headers: []kafkago.Header{{Key: "ce_id", Value: []byte("x")}}},
		}
		var buf bytes.Buffer
		raw, err := encodeIdempotent(&buf, recs, codec, producer{id: 4242, epoch: 7, seq: 1000, valid: true})
		if err != nil {
			t.Fatalf("%v: %v", codec, err)
		}
		batch := raw[rawSizeLen:]
		if got, want := binary.BigEndian.Uint32(batch[batchCRC:]), crc32.Checksum(batch[batchAttributes:], castagnoli); got != want {
			t.Errorf("%v: checksum %x, want %x", codec, got, want)
		}
		var rs protocol.RecordSet
		if _, err := rs.ReadFrom(bytes.NewReader(raw)); err != nil {
			t.Fatalf("%v: kafka-go cannot read the batch back: %v", codec, err)
		}
		rb, ok := rs.Records.(*protocol.RecordStream)
		if !ok || len(rb.Records) != 1 {
			t.Fatalf("%v: read back %T, want one batch", codec, rs.Records)
		}
		b, ok := rb.Records[0].(*protocol.RecordBatch)
		if !ok {
			t.Fatalf("%v: read back %T, want a record batch", codec, rb.Records[0])
		}
		if b.ProducerID != 4242 || b.ProducerEpoch != 7 || b.BaseSequence != 1000 {
			t.Errorf("%v: producer %d epoch %d sequence %d, want 4242, 7, 1000", codec, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
		}
		if got := b.Attributes.Compression(); got != codec {
			t.Errorf("%v: compression %v", codec, got)
		}
		n := 0
		for {
			if _, err := b.ReadRecord(); err != nil {
				break
			}
			n++
		}
		if n != 2 {
			t.Errorf("%v: %d records read back, want 2", codec, n)
		}
	}
}

func TestAProducerMovesToANewEpochAfterAFailureAndGivesUpItsIDAtTheLast(t *testing.T) {
	p := producer{id: 1, epoch: 3, seq: 10, valid: true}
	p.failed()
	if p != (producer{id: 1, epoch: 4, seq: 0, valid: true}) {
		t.Errorf("after a failure: %+v, want epoch 4 at sequence 0", p)
	}
	p.sent(5)
	if p.seq != 5 {
		t.Errorf("after 5 records: sequence %d", p.seq)
	}
	p.seq = math.MaxInt32 - 2
	p.sent(5)
	// Still below rotateAt, so the wrap moves to the next epoch.
	if p.epoch != 5 || p.seq != 0 {
		t.Errorf("past the last sequence: %+v, want the next epoch at sequence 0", p)
	}
	p.epoch = math.MaxInt16
	p.failed()
	if p.valid {
		t.Errorf("past the last epoch: %+v, want no producer id", p)
	}
}

func TestAProducerTakesANewIDAfterASuccessOnceHalfItsEpochsAreUsed(t *testing.T) {
	p := producer{id: 1, epoch: rotateAt - 1, seq: 0, valid: true}
	p.failed()
	if !p.valid || p.epoch != rotateAt {
		t.Fatalf("after a failure: %+v, want epoch %d", p, rotateAt)
	}
	p.failed()
	if !p.valid {
		t.Fatal("a failure dropped the id: the retry under a new id would not be fenced")
	}
	p.sent(3)
	if p.valid {
		t.Errorf("after a success past epoch %d: %+v, want the id given up", rotateAt, p)
	}
}

// Only answers known to be given before the append end a batch or leave it
// without doubt; everything else, including what is no Kafka answer at
// all, is in doubt.
func TestAProduceAnswerIsInDoubtUnlessKnownToComeBeforeTheAppend(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("kafka: produce 1 records to t[0]: %w", err) }
	for _, c := range []struct {
		err  error
		want produceClass
	}{
		{wrap(kafkago.NotLeaderForPartition), inDoubt},
		{wrap(fmt.Errorf("%w: Not leader for partition.", kafkago.NotLeaderForPartition)), inDoubt},
		{wrap(kafkago.NotEnoughReplicasAfterAppend), inDoubt},
		{wrap(kafkago.RequestTimedOut), inDoubt},
		{wrap(kafkago.LeaderNotAvailable), inDoubt},
		{wrap(kafkago.Unknown), inDoubt},
		{wrap(kafkago.Error(4242)), inDoubt},
		{wrap(io.ErrUnexpectedEOF), inDoubt},
		{wrap(context.DeadlineExceeded), inDoubt},
		{wrap(kafkago.NotEnoughReplicas), retriable},
		{wrap(kafkago.UnknownTopicOrPartition), retriable},
		{wrap(kafkago.MessageSizeTooLarge), refusedForGood},
		{wrap(kafkago.RecordListTooLarge), refusedForGood},
		{wrap(kafkago.InvalidMessage), refusedForGood},
		{wrap(kafkago.InvalidRecord), refusedForGood},
		{wrap(kafkago.InvalidTimestamp), refusedForGood},
		{wrap(kafkago.InvalidRequiredAcks), refusedForGood},
		{wrap(kafkago.TopicAuthorizationFailed), refusedForGood},
		{wrap(kafkago.ClusterAuthorizationFailed), refusedForGood},
		{wrap(kafkago.OutOfOrderSequenceNumber), producerState},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
