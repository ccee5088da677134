package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// appendBatch appends rs as one uncompressed v2 record batch, stamped with
// the producer's id, epoch and base sequence, after the 4-byte size that a
// RawRecordSet starts with: the bytes kafka-go's RecordSet.WriteTo writes
// for the same records (TestTheBatchIsWhatKafkaGoWrites), written straight
// from kubewire's records into b instead of through kafka-go's record
// readers, pages and copy out of them. A record without a time gets now,
// as kafka-go gives it.
func appendBatch(b []byte, rs []record, p producer, now time.Time) []byte {
	start := len(b)
	b = append(b, make([]byte, rawSizeLen+batchHeaderLen)...)
	batch := b[start+rawSizeLen:]
	binary.BigEndian.PutUint32(batch[12:], 0xffffffff) // partition leader epoch: -1
	batch[batchMagic] = 2
	binary.BigEndian.PutUint64(batch[batchProducerID:], uint64(p.id))
	binary.BigEndian.PutUint16(batch[batchEpoch:], uint16(p.epoch))
	binary.BigEndian.PutUint32(batch[batchBaseSeq:], uint32(p.seq))

	current := millis(now)
	var first, maxT int64
	for i := range rs {
		r := &rs[i]
		t := millis(r.time)
		if t == 0 {
			t = current
		}
		if i == 0 {
			first = t
		}
		maxT = max(maxT, t)
		delta, offset := t-first, int64(i)
		// The record's length comes first. The length of an event's
		// headers is known only once they are written, so the record goes
		// after room for the length of its bound, which is nearly always
		// the length's own size, and moves to fit the length otherwise:
		// back if it is shorter, and forward should the bound ever fall
		// short of what the headers took (a header eventHeadersSize missed),
		// which would otherwise overwrite the record's first bytes.
		at := len(b)
		room := varintLen(int64(recordBound(r)))
		b = append(b, make([]byte, room)...)
		b = append(b, 0) // record attributes
		b = binary.AppendVarint(b, delta)
		b = binary.AppendVarint(b, offset)
		b = appendNullBytes(b, r.key)
		b = appendNullBytes(b, r.value)
		if r.fromEvent {
			b = appendEventHeaders(b, r.ev)
		} else {
			b = binary.AppendVarint(b, int64(len(r.headers)))
			for _, h := range r.headers {
				b = binary.AppendVarint(b, int64(len(h.Key)))
				b = append(b, h.Key...)
				b = appendNullBytes(b, h.Value)
			}
		}
		body := len(b) - at - room
		if n := varintLen(int64(body)); n != room {
			if n > room {
				b = append(b, make([]byte, n-room)...)
			}
			copy(b[at+n:], b[at+room:at+room+body])
			b = b[:at+n+body]
		}
		binary.PutVarint(b[at:], int64(body))
	}

	batch = b[start+rawSizeLen:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(batch)))
	binary.BigEndian.PutUint32(batch[8:], uint32(len(batch)-12)) // batch length: after itself
	binary.BigEndian.PutUint32(batch[23:], uint32(len(rs)-1))    // last offset delta
	binary.BigEndian.PutUint64(batch[27:], uint64(first))
	binary.BigEndian.PutUint64(batch[35:], uint64(maxT))
	binary.BigEndian.PutUint32(batch[57:], uint32(len(rs)))
	binary.BigEndian.PutUint32(batch[batchCRC:], crc32.Checksum(batch[batchAttributes:], castagnoli))
	return b
}

// millis is a record's timestamp as Kafka holds it (as kafka-go computes
// it), 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano() / int64(time.Millisecond)
}

// batchBound bounds the size of rs as appendBatch writes them.
func batchBound(rs []record) int {
	n := rawSizeLen + batchHeaderLen
	for i := range rs {
		n += recordBound(&rs[i])
	}
	return n
}

// recordBound bounds the size of r as appendBatch writes it.
func recordBound(r *record) int {
	n := recordFraming + len(r.key) + len(r.value) + r.hcount*headerFraming + r.hbytes
	for _, h := range r.headers {
		n += headerFraming + len(h.Key) + len(h.Value)
	}
	return n
}

// appendNullBytes appends b with its length, or the null length -1 for a
// nil b (a tombstone's value).
func appendNullBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

func nullBytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the length of v as a zig-zag varint, Kafka's varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
