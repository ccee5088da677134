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
	"slices"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/tick"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// Idempotent production.
//
// A produce request that kubewire gave up on (its deadline passed while the
// broker restarted, or its connection broke) may still be sitting in the
// broker's request queue, or may have been appended with its answer lost.
// Kafka orders requests only per connection, so a stale copy can be
// appended after its own retry, which went out on a new connection, and
// after newer changes of the same object. Only the broker can sort this
// out, and it does so for idempotent producers: each batch carries a
// producer id, an epoch and the sequence number of its first record. The
// broker keeps the sequence ranges of the last five batches of each
// producer and partition. A batch that repeats one of them is a duplicate:
// the broker answers it with success (DUPLICATE_SEQUENCE_NUMBER before
// Kafka 1.0) and does not append it again. A batch of an older epoch than
// the newest it has seen is refused (INVALID_PRODUCER_EPOCH).
//
// So every partition loop is its own idempotent producer, and a request
// whose outcome it does not know stays pending: the next request the loop
// sends is that very batch again, byte for byte, with the same id, epoch and
// sequence, before anything newer. Whichever copies reach the broker, in
// whatever order, it appends the batch once: a copy that arrives after
// another is a duplicate, and the loop never has more than one sequence
// range in doubt. Records that a resent batch got acknowledged are not sent
// again when the dispatcher's retry of their Write reaches the loop (the
// retry starts with them, see partition.skipResolved). Nor are records
// acknowledged before the request in doubt whose event failed with it: a
// delete whose event went out in the acknowledged request and whose
// tombstone is in doubt is retried as its tombstone alone (placed.go).
//
// In doubt is the default: an answer moves the sequence on only if it says
// for certain that the broker did not append the batch and never will (see
// produceClasses). NOT_LEADER_OR_FOLLOWER is not such an answer: with
// acks=all, a leader that loses its leadership while it waits for its
// followers answers it after the append. Had the batch been dropped, the
// next batch would take its sequence, the broker would take that batch for
// a copy of the one it holds, drop it and answer success: a silent loss.
// A batch whose every copy the broker refused before appending, at least
// one of them for good (too large, invalid, not authorised), is in no
// doubt: it is dropped, and its sequence goes to the next batch.
//
// The loop moves to a new epoch, at sequence 0, only when a pending batch
// cannot go out unchanged: the broker refused it for good (too large, say:
// it goes out split) after an earlier copy's fate was unknown, or it
// refused its sequence (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID:
// the broker holds something other than what it acknowledged, which can
// mean it lost records). The new epoch fences every stale copy of the old
// one (KIP-360 lets an idempotent producer bump its epoch itself). Each
// partition owning its producer id keeps an epoch bump on one partition
// from fencing the others.
//
// A pending batch goes out again only when the loop sends its next request,
// that is when a Write reaches it (the dispatcher's retry, with its
// backoff, or a newer Write), so it never spins. Each copy goes to the
// partition's leader as kafka-go's transport knows it: after any failure
// the partition looks the leader up again in the transport's cached
// metadata (produceconn.go). kafka-go does not refresh that cache when a
// broker answers NOT_LEADER_OR_FOLLOWER, but refreshes it at random within
// every MetadataTTL (two seconds, see newTransport) and keeps the last good
// one while a refresh fails, so after a leader change the copies reach the
// new leader within about MetadataTTL.
//
// kafka-go writes -1 (no producer) into every record batch it encodes and
// has no idempotent producer, so the batch is encoded by kafka-go, the
// producer fields are written into it, and it is sent on the sink's own
// produce connections (produceconn.go).

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
// in doubt (no batch is pending), so nothing sent under it can land after the new id's batches;
// waiting for the last epoch would leave a failed request of the old id
// unfenced against the retry under the new one.
const rotateAt = math.MaxInt16 / 2

// failed moves to the next epoch, after the partition gave up a batch the
// broker may or may not have, so that no copy of it can be appended after
// the next request. Past the last epoch it drops the id: that takes 16k
// batches given up in a row (see rotateAt), and the retry under a new id
// is then not fenced against the last one.
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
		s.observe(err)
		var ke kafkago.Error
		if err == nil || !errors.As(err, &ke) || !ke.Temporary() {
			return pr, err
		}
		if !tick.Sleep(ctx, backoff) {
			return producer{}, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
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

// encodeIdempotent encodes records into buf, replacing what it held, as one
// v2 record batch stamped with the producer's id, epoch and base sequence.
// The result is buf's bytes. buf is sized for the batch first: grown while
// kafka-go writes into it, it would be copied at every doubling.
func encodeIdempotent(buf *bytes.Buffer, recs []kafkago.Record, codec kafkago.Compression, p producer) ([]byte, error) {
	buf.Reset()
	buf.Grow(batchSize(recs))
	rs := protocol.RecordSet{
		Version:    2,
		Attributes: protocol.Attributes(codec) & 0x7,
		Records:    protocol.NewRecordReader(recs...),
	}
	if _, err := rs.WriteTo(buf); err != nil {
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

// Upper bounds of a v2 record's framing: its length, attributes, timestamp
// and offset deltas, key and value lengths and header count; and of a
// header's two lengths. Each is a varint of at most 5 bytes, or 10 for the
// timestamp delta.
const (
	recordFraming = 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerFraming = 5 + 5
)

// batchSize bounds the size of recs encoded as one uncompressed v2 batch
// after the size prefix of a RawRecordSet. A compressed batch is normally
// smaller, so the bound holds for it too, give or take a codec's few bytes
// of framing on incompressible data. It is batchBound over kafka-go's
// records, which encodeIdempotent takes.
func batchSize(recs []kafkago.Record) int {
	n := rawSizeLen + batchHeaderLen
	for i := range recs {
		r := &recs[i]
		n += recordFraming
		if r.Key != nil {
			n += r.Key.Len()
		}
		if r.Value != nil {
			n += r.Value.Len()
		}
		for _, h := range r.Headers {
			n += headerFraming + len(h.Key) + len(h.Value)
		}
	}
	return n
}

// pending is a stamped batch whose outcome the partition does not know: no
// answer came, or the broker answered with an error that leaves it free to
// have appended the batch, or asked for it to be retried (see
// produceClasses). It is resent unchanged until the broker says what
// became of it.
type pending struct {
	records []record
	// raw is the batch as sent. A recycled batch keeps its array here,
	// emptied, for the next batch's bytes.
	raw []byte
	// sends counts the copies sent so far.
	sends int
	// doubt is set once a copy got no answer, or one that allows the batch
	// to be in the log. Until then every copy was refused before the
	// broker appended it.
	doubt bool
	// unanswered is set once a call to send a copy returned without the
	// broker's answer (a deadline, a broken connection). The batch's buffer
	// is then never reused (see recycle).
	unanswered bool
}

// produceClass is what a produce answer says about the batch it answers.
type produceClass int

const (
	// inDoubt: the broker may have appended the batch, or may still append
	// a copy of it. The zero value: whatever is not known for certain to
	// have been refused is in doubt.
	inDoubt produceClass = iota
	// retriable: the broker refused the batch before appending it, for a
	// reason that may pass; the same bytes may be taken later.
	retriable
	// refusedForGood: the broker refused the batch before appending it,
	// and will refuse the same bytes again.
	refusedForGood
	// producerState: the broker refused the producer id, epoch or
	// sequence; sendPending handles each of these on its own.
	producerState
)

// produceClasses sorts the error codes of a ProduceResponse partition. It is
// kubewire's own reading of the Kafka protocol guide (the error code table,
// https://kafka.apache.org/protocol#protocol_error_codes, and the errors
// that ProduceResponse documents), checked against where the broker raises
// each one, before or after its append, and against two producers read as
// references: the Java client (Sender and TransactionManager: a batch
// answered with a retriable error goes out again with its sequence, one
// that expired in flight leaves its sequence unresolved, and an idempotent
// batch failed for good moves the partition to a new epoch) and franz-go
// (kgo/sink.go: REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND make
// a batch "unsure if produced", which is then retried past the retry
// limit). Both retry NOT_LEADER_OR_FOLLOWER with the same sequence too.
//
// A code that is not here, an error that is no broker answer (a timeout, a
// broken connection) and an answer that kubewire does not know are in
// doubt. DUPLICATE_SEQUENCE_NUMBER is not here either: roundTrip takes it
// for success, since the broker holds the batch from an earlier copy.
var produceClasses = map[kafkago.Error]produceClass{
	// The broker checks the request and the batch before it appends: the
	// size, the checksum and the records' validity, the timestamps, the
	// acks, the principal's rights. A batch refused for any of these is
	// not in the log and never will be as it is. CORRUPT_MESSAGE can come
	// from damage on the wire, which the Java client retries; the
	// dispatcher's retry sends the records again in a new batch, which
	// covers that too.
	kafkago.MessageSizeTooLarge:                refusedForGood,
	kafkago.RecordListTooLarge:                 refusedForGood,
	kafkago.InvalidMessage:                     refusedForGood, // CORRUPT_MESSAGE
	kafkago.InvalidRecord:                      refusedForGood,
	kafkago.InvalidTimestamp:                   refusedForGood,
	kafkago.InvalidRequiredAcks:                refusedForGood,
	kafkago.InvalidTopic:                       refusedForGood, // an internal topic, say
	kafkago.UnsupportedForMessageFormat:        refusedForGood,
	kafkago.UnsupportedCompressionType:         refusedForGood,
	kafkago.TopicAuthorizationFailed:           refusedForGood,
	kafkago.ClusterAuthorizationFailed:         refusedForGood,
	kafkago.TransactionalIDAuthorizationFailed: refusedForGood,

	// Refused before the append, but the same bytes may be taken later: the
	// leader had too few in-sync replicas when it checked (after the
	// append it answers NOT_ENOUGH_REPLICAS_AFTER_APPEND instead), or does
	// not host the partition (yet, or any more: a partition deleted while a
	// copy waited for its followers takes that copy with it).
	kafkago.NotEnoughReplicas:       retriable,
	kafkago.UnknownTopicOrPartition: retriable,

	// Listed for the reader; a missing code is in doubt all the same.
	// NOT_LEADER_OR_FOLLOWER and KAFKA_STORAGE_ERROR can be answered after
	// the append (a leadership lost, a log directory failed while the
	// request waited for its followers); the others say nothing about
	// whether the batch was appended.
	kafkago.NotLeaderForPartition:        inDoubt,
	kafkago.NotEnoughReplicasAfterAppend: inDoubt,
	kafkago.RequestTimedOut:              inDoubt,
	kafkago.KafkaStorageError:            inDoubt,
	kafkago.LeaderNotAvailable:           inDoubt,
	kafkago.BrokerNotAvailable:           inDoubt,
	kafkago.NetworkException:             inDoubt,
	kafkago.FencedLeaderEpoch:            inDoubt,
	kafkago.Unknown:                      inDoubt,

	kafkago.OutOfOrderSequenceNumber: producerState,
	kafkago.UnknownProducerId:        producerState,
	kafkago.InvalidProducerEpoch:     producerState,
	kafkago.ProducerFenced:           producerState,
	kafkago.InvalidProducerIDMapping: producerState,
}

// classify returns the class of a failed produce request's error (see
// produceClasses).
func classify(err error) produceClass {
	var ke kafkago.Error
	if !errors.As(err, &ke) {
		return inDoubt
	}
	return produceClasses[ke]
}

// recordKey names a record within one partition: the event it stands for
// and its kind (an event, or the tombstone after a delete).
type recordKey struct {
	src  *encoding.Event
	kind string
}

// produceIdempotent stamps the items' records as the partition's next
// batch, getting a producer id first if it has none, and sends it as the
// pending batch.
func (p *partition) produceIdempotent(items []item) error {
	s := p.s
	if !p.producer.valid {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout.Duration)
		pr, err := s.takeProducerID(ctx)
		cancel()
		if err != nil {
			mProduceRequests.WithLabelValues(s.name, outcome(err)).Inc()
			return fmt.Errorf("kafka: produce %d records to %s[%d]: %w", len(items), p.topic, p.id, err)
		}
		p.producer = pr
	}
	pd := p.spare
	p.spare = nil
	if pd == nil {
		pd = &pending{}
	}
	// The batch's own copy: items are rebuilt for the next request while
	// the batch may still be pending.
	for i := range items {
		pd.records = append(pd.records, items[i].r)
	}
	var err error
	if s.compression == 0 {
		pd.raw = appendBatch(slices.Grow(pd.raw[:0], batchBound(pd.records)), pd.records, p.producer, time.Now())
	} else if pd.raw, err = p.encodeCompressed(pd); err != nil {
		p.recycle(pd)
		return err
	}
	p.pending = pd
	return p.sendPending()
}

// encodeCompressed encodes pd's records with kafka-go, which compresses
// them, into pd's array.
func (p *partition) encodeCompressed(pd *pending) ([]byte, error) {
	// The encoder is done with recs and their readers when it returns, so
	// the partition's arrays serve every batch.
	recs := slices.Grow(p.recs[:0], len(pd.records))[:len(pd.records)]
	bs := slices.Grow(p.payloads[:0], 2*len(pd.records))[:2*len(pd.records)]
	setRecords(recs, bs, pd.records)
	raw, err := encodeIdempotent(bytes.NewBuffer(pd.raw[:0]), recs, p.s.compression, p.producer)
	clear(recs)
	clear(bs)
	p.recs, p.payloads = recs[:0], bs[:0]
	return raw, err
}

// recycle keeps the storage of pd, a batch that is no longer pending, for
// the partition's next batch. Only a batch whose every copy was answered
// is kept: a rawProducer is done with raw once it returns an answer, but
// one that gave up waiting may not be (kafka-go's Transport, which sent
// these before produceconn.go, read raw in a goroutine of its own).
// Resends are rare, so dropping such a buffer costs nothing that matters.
func (p *partition) recycle(pd *pending) {
	if pd.unanswered {
		return
	}
	// Cleared so that a kept batch does not hold on to its events.
	clear(pd.records)
	*pd = pending{records: pd.records[:0], raw: pd.raw[:0]}
	p.spare = pd
}

// resend sends the pending batch again, unchanged. Whatever it got
// acknowledged is resolved (see sendPending).
func (p *partition) resend() error {
	mProduceResends.WithLabelValues(p.s.name).Inc()
	return p.sendPending()
}

// skipResolved counts as sent the records at the head of each unit that a
// resent batch already got acknowledged. Their Write had failed them while
// the batch was in doubt, so the dispatcher writes their events again, and
// only the events that failed: a retried unit starts with the records of
// the batch that was in doubt. Without this the broker would append them a
// second time, once from the resend and once from the retry.
func (p *partition) skipResolved(batch []*unit) {
	if len(p.resolved) == 0 {
		return
	}
	for _, u := range batch {
		for u.sent < len(u.records) {
			r := &u.records[u.sent]
			k := recordKey{r.src, r.kind}
			if _, ok := p.resolved[k]; !ok {
				break
			}
			delete(p.resolved, k)
			u.sent++
		}
	}
}

// sendPending sends the pending batch and decides, from the answer,
// whether it stays pending.
func (p *partition) sendPending() error {
	s, pd := p.s, p.pending
	pd.sends++
	err := p.roundTrip(pd.records, func(deadline time.Time) (*kafkago.ProduceResponse, error) {
		res, err := s.produce.rawProduce(deadline, p, pd.raw)
		if err != nil {
			pd.unanswered = true
		}
		return res, err
	})
	switch {
	case err == nil:
		p.pending = nil
		p.producer.sent(len(pd.records))
		if pd.sends > 1 {
			// A resend: the Writes of its records had failed while it was
			// in doubt, and their retries must not send them again.
			for _, r := range pd.records {
				p.resolved[recordKey{r.src, r.kind}] = struct{}{}
			}
		}
	case errors.Is(err, kafkago.OutOfOrderSequenceNumber) || errors.Is(err, kafkago.UnknownProducerId):
		// The broker holds something else for this producer than what it
		// acknowledged: it lost acknowledged records (an unclean leader
		// election, a truncated log) or its producer state. The batch is
		// given up under this epoch, and its Writes' retry sends the
		// records again under the next.
		mSequenceErrors.WithLabelValues(s.name, outcome(err)).Inc()
		s.log.Error("Kafka refused the producer's sequence: the broker may have lost records it had acknowledged; moving to a new producer epoch",
			"topic", p.topic, "partition", p.id, "producerId", p.producer.id, "epoch", p.producer.epoch,
			"sequence", p.producer.seq, "records", len(pd.records), "copies", pd.sends, "err", err)
		if pd.doubt {
			// An earlier copy may be in the log after all (a broker that
			// lost its producer state but not the log).
			s.possibleDuplicates(dupSequenceError, len(pd.records))
		}
		p.pending = nil
		p.producer.failed()
	case errors.Is(err, kafkago.InvalidProducerEpoch) || errors.Is(err, kafkago.ProducerFenced) ||
		errors.Is(err, kafkago.InvalidProducerIDMapping):
		// The broker has a newer epoch of this id than the partition, so
		// every copy sent under it is fenced already; start afresh.
		s.log.Warn("Kafka fenced the partition's idempotent producer; taking a new producer id",
			"topic", p.topic, "partition", p.id, "producerId", p.producer.id, "epoch", p.producer.epoch, "err", err)
		if pd.doubt {
			s.possibleDuplicates(dupFenced, len(pd.records))
		}
		p.pending = nil
		p.producer = producer{}
	default:
		switch classify(err) {
		case refusedForGood:
			p.giveUp(err)
		case retriable:
			// Refused before the append, for now: it stays pending, and
			// whether an earlier copy may be in the log is as it was.
		default:
			// No answer, or one that allows the batch to be in the log: it
			// stays pending, and goes out again unchanged.
			pd.doubt = true
		}
	}
	if p.pending == nil {
		p.recycle(pd)
	}
	return err
}

// giveUp drops the pending batch after the broker refused a copy of it for
// good, before appending it. The Writes' retry sends its records again
// (split, if they were too large).
func (p *partition) giveUp(err error) {
	pd := p.pending
	p.pending = nil
	if !pd.doubt {
		// Every copy was refused before the append and answered, so none
		// is in the log or on its way there, and the broker still expects
		// this sequence: the next batch takes it, in the same epoch. (The
		// Java client moves to a new epoch instead, which spares it from
		// renumbering up to five batches in flight; a partition here has
		// one, and nothing to renumber.)
		return
	}
	// An earlier copy may be in the log, or still on its way, so the
	// sequence cannot go to other records: they go out under a new epoch,
	// which fences that copy. If that copy was appended, its records are
	// in the log twice: repeated, never lost.
	p.s.log.Warn("Kafka refused a batch for good after an earlier copy's fate was unknown; moving to a new producer epoch, its records may be repeated",
		"topic", p.topic, "partition", p.id, "producerId", p.producer.id, "epoch", p.producer.epoch,
		"sequence", p.producer.seq, "records", len(pd.records), "copies", pd.sends, "err", err)
	p.s.possibleDuplicates(dupRefusedAfterDoubt, len(pd.records))
	p.producer.failed()
}
