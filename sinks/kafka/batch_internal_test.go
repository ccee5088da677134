package kafka

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/sinktest"
	kafkago "github.com/segmentio/kafka-go"
)

// kafkaGoBatch is kafka-go's encoding of rs, the oracle of appendBatch.
func kafkaGoBatch(t *testing.T, rs []record, p producer) []byte {
	t.Helper()
	recs := make([]kafkago.Record, len(rs))
	setRecords(recs, make([]payload, 2*len(rs)), rs)
	raw, err := encodeIdempotent(&bytes.Buffer{}, recs, 0, p)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestTheBatchIsWhatKafkaGoWrites(t *testing.T) {
	at := time.Date(2026, 11, 25, 20, 0, 0, 123456789, time.UTC)
	big := bytes.Repeat([]byte("v"), 200<<10) // across kafka-go's 64 KiB pages
	var many []record
	for i := range 300 { // offset deltas and counts of two varint bytes
		many = append(many, record{key: fmt.Appendf(nil, "k%d", i), value: []byte(`{"n":1}`), time: at.Add(time.Duration(i) * time.Second)})
	}
	var headers []kafkago.Header
	for i := range 200 {
		headers = append(headers, kafkago.Header{Key: fmt.Sprintf("ce_x%d", i), Value: []byte("v")})
	}
	for name, rs := range map[string][]record{
		"one":       {{key: []byte("ns/a"), value: []byte(`{"a":1}`), time: at}},
		"tombstone": {{key: []byte("ns/a"), value: []byte(`{}`), time: at}, {key: []byte("ns/a"), time: at}},
		"headers": {{key: []byte("k"), value: []byte("v"), time: at, headers: []kafkago.Header{
			{Key: "ce_id", Value: []byte("1")}, {Key: "empty", Value: []byte{}}, {Key: "null"}, {Key: "ünïcode", Value: []byte("ü")}}}},
		"many headers":   {{key: []byte("k"), value: []byte("v"), time: at, headers: headers}},
		"large value":    {{key: []byte("k"), value: big, time: at}, {key: []byte("k2"), value: []byte("v"), time: at}},
		"times backward": {{key: []byte("a"), value: []byte("1"), time: at}, {key: []byte("b"), value: []byte("2"), time: at.Add(-time.Hour)}},
		"empty key":      {{key: []byte{}, value: []byte("v"), time: at}},
		"many":           many,
	} {
		t.Run(name, func(t *testing.T) {
			p := producer{id: 4242, epoch: 7, seq: 1 << 30, valid: true}
			want := kafkaGoBatch(t, rs, p)
			got := appendBatch(nil, rs, p, time.Now())
			if !bytes.Equal(got, want) {
				t.Fatalf("appendBatch differs from kafka-go at byte %d of %d (kafka-go %d)", firstDiff(got, want), len(got), len(want))
			}
			// Appended after what the slice holds, within its capacity.
			prefix := []byte("xyz")
			if got := appendBatch(prefix, rs, p, time.Now()); !bytes.Equal(got[:3], prefix) || !bytes.Equal(got[3:], want) {
				t.Fatal("appendBatch after a prefix differs")
			}
		})
	}
}

// A record without a time gets the batch's now, as kafka-go gives it its
// time.Now(): the two batches differ only in those timestamps.
func TestARecordWithoutATimeGetsNow(t *testing.T) {
	rs := []record{{key: []byte("a"), value: []byte("1")}, {key: []byte("b"), value: []byte("2")}}
	p := producer{id: 1, valid: true}
	now := time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)
	got := appendBatch(nil, rs, p, now)
	want := kafkaGoBatch(t, rs, p)
	batch := got[rawSizeLen:]
	for _, off := range []int{27, 35} { // first and max timestamps
		if ts := int64(binary.BigEndian.Uint64(batch[off:])); ts != now.UnixMilli() {
			t.Errorf("timestamp at %d is %d, want %d", off, ts, now.UnixMilli())
		}
	}
	w := append([]byte(nil), want...)
	copy(w[rawSizeLen+27:rawSizeLen+43], batch[27:43])
	binary.BigEndian.PutUint32(w[rawSizeLen+batchCRC:], crc32.Checksum(w[rawSizeLen+batchAttributes:], castagnoli))
	if !bytes.Equal(got, w) {
		t.Fatalf("beyond the timestamps, appendBatch differs from kafka-go at byte %d", firstDiff(got, w))
	}
}

// With room for it, a batch is encoded without an allocation.
// The length that starts a record is written after room sized from the
// record's bound. A binary-mode record whose headers outgrow that bound
// (here, sizes that claim none) must still come out as kafka-go writes it,
// not with its length over its first bytes.
func TestARecordLongerThanItsBoundIsStillWrittenWhole(t *testing.T) {
	ev, err := encoding.New(sinktest.Change(informer.OpUpdated, "ns", "cm", 3))
	if err != nil {
		t.Fatal(err)
	}
	r := (&Sink{}).newRecord(ev)
	r.time = time.UnixMilli(1764000000000)
	r.hbytes, r.hcount = 0, 0
	// A value that puts the understated bound just under 8192, where a
	// record's length takes a third varint byte, and the record over it.
	r.value = bytes.Repeat([]byte("v"), 8191-recordBound(&r)+len(r.value))
	want := kafkaGoBatch(t, []record{r}, producer{id: 1, valid: true})
	if bound, size := recordBound(&r), len(want)-rawSizeLen-batchHeaderLen; varintLen(int64(bound)) >= varintLen(int64(size)) {
		t.Fatalf("the record (%d bytes) does not outgrow the varint of its bound (%d)", size, bound)
	}
	if got := appendBatch(nil, []record{r}, producer{id: 1, valid: true}, time.Now()); !bytes.Equal(got, want) {
		t.Fatalf("appendBatch differs from kafka-go at byte %d of %d (kafka-go %d)", firstDiff(got, want), len(got), len(want))
	}
}

func TestAppendBatchAllocatesNothingWithinCapacity(t *testing.T) {
	// A binary-mode record costs nothing to build either: its key, value
	// and headers are its event's.
	ev, err := encoding.New(sinktest.Change(informer.OpUpdated, "ns", "cm", 3))
	if err != nil {
		t.Fatal(err)
	}
	var fromEvent record
	if n := testing.AllocsPerRun(100, func() { fromEvent = (&Sink{}).newRecord(ev) }); n != 0 {
		t.Errorf("a binary-mode record costs %v allocations", n)
	}
	rs := []record{valueRecord("a", 2000), fromEvent, valueRecord("b", 3000)}
	buf := make([]byte, 0, batchBound(rs))
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { buf = appendBatch(buf[:0], rs, producer{id: 1, valid: true}, now) }); n != 0 {
		t.Errorf("appendBatch allocates %v times", n)
	}
	if len(buf) > batchBound(rs) {
		t.Errorf("batch of %d bytes, bound %d", len(buf), batchBound(rs))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
