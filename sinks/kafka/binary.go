package kafka

import (
	"encoding/binary"
	"time"
	"unsafe"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// encodeBinary builds ev's binary-mode record straight from kubewire's
// event, producing what sdk-go's binding.Write produces through
// messageWriter from the same event's CloudEvent
// (TestTheDirectBinaryEncodingIsWhatSDKGoWrites holds the two equal over a
// corpus of every event kubewire sends), at a fraction of the allocations:
// the header values and the key share one buffer, the header names of
// known attributes are constants, and the value is the event's data as it
// is.
func encodeBinary(ev *encoding.Event) kafkago.Message {
	// One pass to size the buffer, so the values' slices share one array.
	n := ev.Len()
	size := len(event.CloudEventsVersionV1) + len(ev.ID()) + len(ev.Source()) + len(ev.Type()) +
		len(ev.DataContentType()) + len(ev.DataSchema()) + len(ev.Subject()) + len(time.RFC3339Nano) + 8
	for i := range n {
		size += len(ev.At(i).Value)
	}
	pk, hasKey := ev.Lookup(encoding.ExtPartitionKey)
	size += len(pk)
	buf := make([]byte, 0, size)
	hs := make([]kafkago.Header, 0, 8+n)
	add := func(name string, value []byte) {
		hs = append(hs, kafkago.Header{Key: name, Value: value})
	}
	str := func(s string) []byte {
		start := len(buf)
		buf = append(buf, s...)
		return buf[start:len(buf):len(buf)]
	}
	// In sdk-go's order: the spec's attributes, then the extensions.
	add(ceHeaders.SpecVersion, str(event.CloudEventsVersionV1))
	add(ceHeaders.ID, str(ev.ID()))
	add(ceHeaders.Source, str(ev.Source()))
	add(ceHeaders.Type, str(ev.Type()))
	if v := ev.DataContentType(); v != "" {
		add(HeaderContentType, str(v))
	}
	if v := ev.DataSchema(); v != "" {
		add(ceHeaders.DataSchema, str(v))
	}
	if v := ev.Subject(); v != "" {
		add(ceHeaders.Subject, str(v))
	}
	if t := ev.Time(); !t.IsZero() {
		start := len(buf)
		buf = t.UTC().AppendFormat(buf, time.RFC3339Nano)
		add(ceHeaders.Time, buf[start:len(buf):len(buf)])
	}
	for i := range n {
		x := ev.At(i)
		add(ceHeaders.Extension(x.Name), str(x.Value))
	}
	m := kafkago.Message{Headers: hs}
	if hasKey {
		m.Key = str(pk)
	}
	if len(ev.Data()) > 0 {
		m.Value = ev.Data()
	}
	return m
}

// eventHeadersSize is the number of ev's binary-mode headers and the bytes
// of their names and values, the time's at its longest: what
// appendEventHeaders writes, less framing.
func eventHeadersSize(ev *encoding.Event) (count, size int) {
	count, size = 4, len(ceHeaders.SpecVersion)+len(event.CloudEventsVersionV1)+len(ceHeaders.ID)+len(ev.ID())+
		len(ceHeaders.Source)+len(ev.Source())+len(ceHeaders.Type)+len(ev.Type())
	opt := func(name, v string) {
		if v != "" {
			count++
			size += len(name) + len(v)
		}
	}
	opt(HeaderContentType, ev.DataContentType())
	opt(ceHeaders.DataSchema, ev.DataSchema())
	opt(ceHeaders.Subject, ev.Subject())
	if !ev.Time().IsZero() {
		count++
		size += len(ceHeaders.Time) + len(time.RFC3339Nano)
	}
	for i := range ev.Len() {
		x := ev.At(i)
		count++
		size += len(ceHeaders.Extension(x.Name)) + len(x.Value)
	}
	return count, size
}

// appendEventHeaders appends ev's binary-mode headers as a v2 record's
// header count and headers: what appendBatch writes for encodeBinary's
// headers (TestTheBatchOfEventsIsTheBatchOfTheirMessages), written from the
// event without building them.
func appendEventHeaders(b []byte, ev *encoding.Event) []byte {
	// Counted here, next to the writes it counts, rather than taken from
	// eventHeadersSize: a count that disagreed would corrupt the batch.
	count := 4 + ev.Len()
	for _, v := range [...]string{ev.DataContentType(), ev.DataSchema(), ev.Subject()} {
		if v != "" {
			count++
		}
	}
	if !ev.Time().IsZero() {
		count++
	}
	b = binary.AppendVarint(b, int64(count))
	b = appendHeader(b, ceHeaders.SpecVersion, event.CloudEventsVersionV1)
	b = appendHeader(b, ceHeaders.ID, ev.ID())
	b = appendHeader(b, ceHeaders.Source, ev.Source())
	b = appendHeader(b, ceHeaders.Type, ev.Type())
	if v := ev.DataContentType(); v != "" {
		b = appendHeader(b, HeaderContentType, v)
	}
	if v := ev.DataSchema(); v != "" {
		b = appendHeader(b, ceHeaders.DataSchema, v)
	}
	if v := ev.Subject(); v != "" {
		b = appendHeader(b, ceHeaders.Subject, v)
	}
	if t := ev.Time(); !t.IsZero() {
		b = binary.AppendVarint(b, int64(len(ceHeaders.Time)))
		b = append(b, ceHeaders.Time...)
		// The value's length is one varint byte whatever the time: an
		// RFC 3339 time with nanoseconds is at most 35 bytes.
		at := len(b)
		b = t.UTC().AppendFormat(append(b, 0), time.RFC3339Nano)
		b[at] = byte(2 * (len(b) - at - 1)) // zig-zag
	}
	for i := range ev.Len() {
		x := ev.At(i)
		b = appendHeader(b, ceHeaders.Extension(x.Name), x.Value)
	}
	return b
}

func appendHeader(b []byte, name, value string) []byte {
	b = binary.AppendVarint(b, int64(len(name)))
	b = append(b, name...)
	b = binary.AppendVarint(b, int64(len(value)))
	return append(b, value...)
}

// readOnlyBytes is s as a byte slice without a copy, for a record's key:
// the batch encoders only read it.
func readOnlyBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// ceHeaders names the attributes' headers (binding 3.2.3), once for the
// process.
var ceHeaders = encoding.NewHeaderNames(HeaderPrefix)
