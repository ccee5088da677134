package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/kubewire/kubewire/internal/base/config"
)

// broker stands in for kafka-go's Transport and the broker behind it. A
// call it leaves unanswered keeps the request's record set unread, as a
// Transport's connection goroutine may still be encoding a request when
// the call that handed it over gives up: the test reads it later.
type broker struct {
	mu sync.Mutex
	// next is how the following produce calls end: "" for success, "lost"
	// for no answer.
	next []string
	// held are the record sets of unanswered calls.
	held []io.Reader
	// got are the record sets the broker read, in order.
	got [][]byte
	// discard makes the broker read record sets without keeping them.
	discard bool
}

func (b *broker) rawProduce(_ time.Time, p *partition, raw []byte) (*kafkago.ProduceResponse, error) {
	rs := bytes.NewReader(raw)
	b.mu.Lock()
	defer b.mu.Unlock()
	how := ""
	if len(b.next) > 0 {
		how, b.next = b.next[0], b.next[1:]
	}
	if how == "lost" {
		b.held = append(b.held, rs)
		return nil, context.DeadlineExceeded
	}
	if b.discard {
		if _, err := io.Copy(io.Discard, rs); err != nil {
			return nil, err
		}
	} else {
		raw, err := io.ReadAll(rs)
		if err != nil {
			return nil, err
		}
		b.got = append(b.got, raw)
	}
	return &kafkago.ProduceResponse{}, nil
}

// brokerPartition is an idempotent partition, with no loop running, that
// produces to b: the tests call send themselves.
func brokerPartition(b *broker) *partition {
	s := &Sink{
		name:       "batchbuf-test",
		cfg:        Config{RequestTimeout: config.NewDuration(10 * time.Second), Batch: &Batch{MaxMessages: 1000, MaxBytes: 1 << 20}},
		log:        slog.New(slog.DiscardHandler),
		idempotent: true,
		acks:       kafkago.RequireAll,
		produce:    b,
	}
	return &partition{s: s, topic: "t", producer: producer{id: 7, valid: true},
		objects: map[string]struct{}{}, resolved: map[recordKey]struct{}{}}
}

func valueRecord(name string, size int) record {
	return record{key: []byte(name), value: bytes.Repeat([]byte{'x'}, size), kind: kindEvent, object: name,
		headers: []kafkago.Header{{Key: "ce_id", Value: []byte(name)}}}
}

// sendRecords sends one unit of rs through p's loop step and returns its
// outcome.
func sendRecords(p *partition, rs ...record) error {
	u := newUnit(rs)
	u.state.Store(unitTaken)
	p.send([]*unit{u})
	return <-u.done
}

// A batch whose first copy went unanswered may still be read by kafka-go
// after the call returned; its buffer must not become the next batch's,
// even once a resend of it was acknowledged.
func TestTheBufferOfABatchWithAnUnansweredCopyIsNotReused(t *testing.T) {
	b := &broker{next: []string{"lost"}}
	p := brokerPartition(b)
	a := valueRecord("a", 300)
	if err := sendRecords(p, a); err == nil {
		t.Fatal("a batch that got no answer reported success")
	}
	// The retry: the pending batch goes out again, is acknowledged, and
	// the next batch, of b, is encoded after it.
	if err := sendRecords(p, a, valueRecord("b", 300)); err != nil {
		t.Fatal(err)
	}
	if len(b.got) != 2 || len(b.held) != 1 {
		t.Fatalf("the broker read %d batches and holds %d, want the resend of a, then b, and a's first copy", len(b.got), len(b.held))
	}
	late, err := io.ReadAll(b.held[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(late, b.got[0]) {
		t.Errorf("the first copy of a, read after b was encoded, is not a's batch any more:\n got  %q\n want %q", late, b.got[0])
	}
	if bytes.Equal(b.got[0], b.got[1]) || !bytes.Contains(b.got[1], []byte("b")) {
		t.Errorf("the second batch is not b's: %q", b.got[1])
	}
}

// A batch that the broker acknowledged at once leaves its buffer to the
// next batch, which is still sent whole and correct.
func TestAnAcknowledgedBatchLeavesItsBufferToTheNext(t *testing.T) {
	b := &broker{}
	p := brokerPartition(b)
	if err := sendRecords(p, valueRecord("a", 2000)); err != nil {
		t.Fatal(err)
	}
	if p.spare == nil || cap(p.spare.raw) < len(b.got[0]) {
		t.Fatal("the acknowledged batch's buffer was not kept")
	}
	kept := p.spare.raw[:1]
	if err := sendRecords(p, valueRecord("b", 1000)); err != nil {
		t.Fatal(err)
	}
	if &p.spare.raw[:1][0] != &kept[0] {
		t.Error("the second batch did not reuse the first one's buffer")
	}
	for i, raw := range b.got {
		var rs protocol.RecordSet
		if _, err := rs.ReadFrom(bytes.NewReader(raw)); err != nil {
			t.Fatalf("batch %d cannot be read back: %v", i, err)
		}
	}
	if _, _, seq := batchProducer(b.got[1]); seq != 1 {
		t.Errorf("the second batch starts at sequence %d, want 1", seq)
	}
}

// A partition that waits for work keeps a small spare buffer, and lets a
// large one go once it has waited spareIdle: idle partitions must not each
// hold a batch of up to batch.maxBytes. A short wait between batches keeps
// it, or every large batch would be a fresh allocation.
func TestAnIdlePartitionLetsALargeBufferGo(t *testing.T) {
	defer func(d time.Duration) { spareIdle = d }(spareIdle)
	defer func() { testHookWaiting, testHookSpareDropped = func() {}, func() {} }()
	// wait runs the partition's wait for work, hands it a unit once the
	// hook given by on has fired, and reports whether the spare buffer
	// survived. The hooks are set before the partition's goroutine starts.
	wait := func(p *partition, on *func()) (kept bool) {
		testHookWaiting, testHookSpareDropped = func() {}, func() {}
		fired := make(chan struct{})
		var once sync.Once
		*on = func() { once.Do(func() { close(fired) }) }
		p.wake = make(chan struct{}, 1)
		got := make(chan []*unit, 1)
		go func() { got <- p.next(t.Context()) }()
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			t.Fatal("the partition did not get to the point under test")
		}
		p.submit(newUnit([]record{valueRecord("next", 10)}))
		select {
		case <-got:
		case <-time.After(time.Minute):
			t.Fatal("the partition did not take the unit")
		}
		return p.spare != nil
	}
	large := func(t *testing.T) *partition {
		p := brokerPartition(&broker{})
		if err := sendRecords(p, valueRecord("large", 2*maxIdleSpare)); err != nil {
			t.Fatal(err)
		}
		if p.spare == nil {
			t.Fatal("the large batch's buffer was not kept")
		}
		return p
	}

	p := brokerPartition(&broker{})
	if err := sendRecords(p, valueRecord("small", 2000)); err != nil {
		t.Fatal(err)
	}
	spareIdle = time.Nanosecond
	if !wait(p, &testHookWaiting) {
		t.Error("a small spare buffer was dropped while the partition waited")
	}
	spareIdle = time.Hour
	if !wait(large(t), &testHookWaiting) {
		t.Error("a large spare buffer was dropped on a wait shorter than spareIdle")
	}
	spareIdle = time.Millisecond
	if p := large(t); wait(p, &testHookSpareDropped) {
		t.Errorf("an idle partition keeps a spare buffer of %d bytes", cap(p.spare.raw))
	}
}

func batchProducer(raw []byte) (id int64, epoch int16, seq int32) {
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(raw)); err != nil {
		return -1, -1, -1
	}
	rb := rs.Records.(*protocol.RecordStream).Records[0].(*protocol.RecordBatch)
	return rb.ProducerID, rb.ProducerEpoch, rb.BaseSequence
}

// Encoding a batch through kafka-go (compressed batches, and the tests'
// stale requests) costs the same allocations whatever its size: its buffer
// is sized once up front, and reused from the partition's last batch when
// there is one. Codec none keeps a compressor's own allocations out of the
// count; production writes uncompressed batches with appendBatch instead
// (TestAppendBatchAllocatesNothingWithinCapacity).
func TestABatchCostsTheSameAllocationsWhateverItsSize(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random, which kafka-go's encoder draws from")
	}
	encode := func(size int, reuse bool) float64 {
		rs := []record{valueRecord("a", size), valueRecord("b", size)}
		recs := make([]kafkago.Record, len(rs))
		bs := make([]payload, 2*len(rs))
		var kept bytes.Buffer
		return testing.AllocsPerRun(50, func() {
			setRecords(recs, bs, rs)
			buf := &kept
			if !reuse {
				buf = &bytes.Buffer{}
			}
			if _, err := encodeIdempotent(buf, recs, 0, producer{id: 1, valid: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, reuse := range []bool{false, true} {
		small, large := encode(100, reuse), encode(200<<10, reuse)
		if large != small {
			t.Errorf("reuse %v: a batch of two 200 KiB records costs %v allocations, one of two 100 B records %v", reuse, large, small)
		}
		// A fresh buffer costs two: the Buffer, and its array.
		if fresh := encode(100, false); reuse && small != fresh-2 {
			t.Errorf("a reused buffer costs %v allocations, a fresh one %v: want exactly the buffer fewer", small, fresh)
		}
	}

	// Through the partition, in the steady state, a request costs the same
	// allocations whatever its number of records: their storage is the
	// partition's, or the last batch's.
	send := func(n int) float64 {
		p := brokerPartition(&broker{discard: true})
		var rs []record
		for i := range n {
			rs = append(rs, valueRecord(fmt.Sprint("object-", i), 2<<10))
		}
		return testing.AllocsPerRun(50, func() {
			if err := sendRecords(p, rs...); err != nil {
				t.Fatal(err)
			}
		})
	}
	if few, many := send(2), send(100); many != few {
		t.Errorf("a request of 100 records of 2 KiB costs %v allocations, one of 2 records %v", many, few)
	}
	t.Logf("allocations of one request through the partition: %v", send(10))
}
