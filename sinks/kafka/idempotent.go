package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// Idempotent production.
//
// A produce request that kubewire gave up on (its deadline passed while the
// broker restarted, or its connection broke) may still be sitting in the
// broker's request queue. Kafka orders requests only per connection, so that
// stale copy can be appended after its own retry, which went out on a new
// connection, and after newer changes of the same object. Only the broker can
// refuse it, and it does so for idempotent producers: each batch carries a
// producer id, an epoch and the sequence number of its first record, and the
// broker rejects a batch whose epoch is older than the newest it has seen
// for that producer and partition.
//
// So every partition loop is its own idempotent producer, and after any
// failed request it moves to the next epoch and starts again at sequence 0
// (KIP-360 lets an idempotent producer bump its epoch itself). A stale batch
// of the old epoch that arrives after the first batch of the new one is
// refused; one that arrives before it was appended before the retry, so the
// retry only repeats events that are already there, each with its id. Each
// partition owning its producer id
// keeps an epoch bump on one partition from fencing the others.
//
// kafka-go writes -1 (no producer) into every record batch it encodes and
// has no idempotent producer, so the batch is encoded by kafka-go, the
// producer fields are written into it, and it is sent with RawProduce.

// producer is a partition's idempotent producer state. The zero value has
// no id yet.
type producer struct {
	id    int64
	epoch int16
	seq   int32
	valid bool
}

// rotateAt is the epoch from which a partition takes a new producer id
// after its next acknowledged request. Only then is nothing of the old id
// in doubt, so nothing sent under it can land after the new id's batches;
// waiting for the last epoch would leave a failed request of the old id
// unfenced against the retry under the new one.
const rotateAt = math.MaxInt16 / 2

// failed moves to the next epoch, so the next request cannot be mistaken
// for a retry of a batch the broker may or may not have. Past the last
// epoch it drops the id: that takes 16k failed requests in a row (see
// rotateAt), and the retry under a new id is then not fenced against the
// last failed one.
func (p *producer) failed() {
	if !p.valid || p.epoch == math.MaxInt16 {
		*p = producer{}
		return
	}
	p.epoch++
	p.seq = 0
}

// sent advances the sequence past n acknowledged records. Sequences wrap at
// MaxInt32 on the broker; moving to a new epoch instead is simpler and just
// as valid.
func (p *producer) sent(n int) {
	switch {
	case p.epoch >= rotateAt:
		*p = producer{}
	case int64(p.seq)+int64(n) > math.MaxInt32:
		p.failed()
	default:
		p.seq += int32(n)
	}
}

// initIdempotent is kafka-go's InitProducerId request, but without its
// Transaction method: kafka-go sends any request that has one through
// FindCoordinator first, even with an empty transactional id, which would
// make an idempotent producer depend on the transaction coordinator and on
// its internal topic. A producer id without a transaction comes from any
// broker. The conversion from initproducerid.Request keeps kafka-go's own
// encoding, which works on the struct's layout.
type initIdempotent initproducerid.Request

func (r *initIdempotent) ApiKey() protocol.ApiKey { return protocol.InitProducerId }

// takeProducerID returns the id Connect got, if it is still unused, or a
// fresh one.
func (s *Sink) takeProducerID(ctx context.Context) (producer, error) {
	s.mu.Lock()
	pr := s.spare
	s.spare = producer{}
	s.mu.Unlock()
	if pr.valid {
		return pr, nil
	}
	return s.newProducerID(ctx)
}

// newProducerID asks the cluster for a fresh producer id.
func (s *Sink) newProducerID(ctx context.Context) (producer, error) {
	s.mu.Lock()
	tr, client := s.transport, s.client
	s.mu.Unlock()
	if tr == nil {
		return producer{}, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout.Duration)
	defer cancel()
	// A broker answers "load in progress" until it has a block of producer
	// ids from the controller, which takes a moment after it starts.
	backoff := 20 * time.Millisecond
	for {
		pr, err := initProducerID(ctx, tr, client.Addr)
		var ke kafkago.Error
		if err == nil || !errors.As(err, &ke) || !ke.Temporary() {
			return pr, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return producer{}, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

func initProducerID(ctx context.Context, tr *kafkago.Transport, addr net.Addr) (producer, error) {
	m, err := tr.RoundTrip(ctx, addr, &initIdempotent{ProducerID: -1, ProducerEpoch: -1})
	if err != nil {
		return producer{}, fmt.Errorf("kafka: get an idempotent producer id: %w", err)
	}
	res, ok := m.(*initproducerid.Response)
	if !ok {
		return producer{}, fmt.Errorf("kafka: get an idempotent producer id: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		err := kafkago.Error(res.ErrorCode)
		hint := ""
		if errors.Is(err, kafkago.ClusterAuthorizationFailed) {
			hint = " (grant the principal IdempotentWrite on the cluster, or set idempotent: false)"
		}
		return producer{}, fmt.Errorf("kafka: get an idempotent producer id%s: %w", hint, err)
	}
	return producer{id: res.ProducerID, epoch: res.ProducerEpoch, valid: true}, nil
}

// castagnoli is the CRC-32C table Kafka checksums record batches with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Offsets in a v2 record batch, after the 4-byte size that a RawRecordSet
// starts with. The checksum covers everything from the attributes on.
const (
	rawSizeLen      = 4
	batchMagic      = 16
	batchCRC        = 17
	batchAttributes = 21
	batchProducerID = 43
	batchEpoch      = 51
	batchBaseSeq    = 53
	batchHeaderLen  = 61
)

// encodeIdempotent encodes records as one v2 record batch stamped with the
// producer's id, epoch and base sequence.
func encodeIdempotent(recs []kafkago.Record, codec kafkago.Compression, p producer) ([]byte, error) {
	var buf bytes.Buffer
	rs := protocol.RecordSet{
		Version:    2,
		Attributes: protocol.Attributes(codec) & 0x7,
		Records:    protocol.NewRecordReader(recs...),
	}
	if _, err := rs.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("kafka: encode record batch: %w", err)
	}
	b := buf.Bytes()
	if len(b) < rawSizeLen+batchHeaderLen || b[rawSizeLen+batchMagic] != 2 {
		return nil, fmt.Errorf("kafka: encode record batch: not a v2 batch (%d bytes)", len(b))
	}
	batch := b[rawSizeLen:]
	binary.BigEndian.PutUint64(batch[batchProducerID:], uint64(p.id))
	binary.BigEndian.PutUint16(batch[batchEpoch:], uint16(p.epoch))
	binary.BigEndian.PutUint32(batch[batchBaseSeq:], uint32(p.seq))
	binary.BigEndian.PutUint32(batch[batchCRC:], crc32.Checksum(batch[batchAttributes:], castagnoli))
	return b, nil
}
