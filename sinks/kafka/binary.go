package kafka

import (
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// encodeBinary builds ev's binary-mode record directly from its
// CloudEvents 1.0 context, producing what sdk-go's binding.Write produces
// through messageWriter (TestTheDirectBinaryEncodingIsWhatSDKGoWrites holds
// the two equal over a corpus of every event kubewire sends), at a fraction
// of the allocations: sdk-go copies the extensions map on every lookup,
// boxes each attribute and allocates every header value and name apart.
// Here the header values and the key share one buffer, header names of
// known attributes are constants, and the value is the event's data as it
// is. ok is false for a context that is not 1.0, which the caller then
// encodes through sdk-go.
func encodeBinary(ev *event.Event) (m kafkago.Message, ok bool, err error) {
	c, isV1 := ev.Context.(*event.EventContextV1)
	if !isV1 {
		return kafkago.Message{}, false, nil
	}
	// One pass to size the buffer, so the values' slices share one array.
	size := len(event.CloudEventsVersionV1) + len(c.ID) + len(c.Type) + len(time.RFC3339Nano) + 8
	source := c.Source.String()
	size += len(source)
	if c.DataContentType != nil {
		size += len(*c.DataContentType)
	}
	if c.Subject != nil {
		size += len(*c.Subject)
	}
	for _, v := range c.Extensions {
		if s, isString := v.(string); isString {
			size += len(s)
		}
	}
	if pk, isString := c.Extensions[encoding.ExtPartitionKey].(string); isString {
		size += len(pk)
	}
	buf := make([]byte, 0, size)
	hs := make([]kafkago.Header, 0, 8+len(c.Extensions))
	add := func(name string, value []byte) {
		hs = append(hs, kafkago.Header{Key: name, Value: value})
	}
	str := func(s string) []byte {
		start := len(buf)
		buf = append(buf, s...)
		return buf[start:len(buf):len(buf)]
	}
	// In sdk-go's order: the spec's attributes, then the extensions.
	add(headerSpecVersion, str(event.CloudEventsVersionV1))
	add(headerID, str(c.ID))
	add(headerSource, str(source))
	add(headerType, str(c.Type))
	if c.DataContentType != nil {
		add(HeaderContentType, str(*c.DataContentType))
	}
	if c.DataSchema != nil {
		add(headerDataSchema, str(c.DataSchema.String()))
	}
	if c.Subject != nil {
		add(headerSubject, str(*c.Subject))
	}
	if c.Time != nil {
		start := len(buf)
		buf = c.Time.Time.UTC().AppendFormat(buf, time.RFC3339Nano)
		add(headerTime, buf[start:len(buf):len(buf)])
	}
	for name, v := range c.Extensions {
		s, err := encoding.ExtensionValue(v)
		if err != nil {
			return kafkago.Message{}, true, err
		}
		add(extensionHeaders.Extension(name), str(s))
	}
	if pk, isString := c.Extensions[encoding.ExtPartitionKey].(string); isString {
		m.Key = str(pk)
	} else if v, has := c.Extensions[encoding.ExtPartitionKey]; has {
		s, err := types.Format(v)
		if err != nil {
			return kafkago.Message{}, true, err
		}
		m.Key = []byte(s)
	}
	m.Headers = hs
	if len(ev.DataEncoded) > 0 {
		m.Value = ev.DataEncoded
	}
	return m, true, nil
}

// Header names of the spec's attributes (binding 3.2.3).
const (
	headerSpecVersion = HeaderPrefix + "specversion"
	headerID          = HeaderPrefix + "id"
	headerSource      = HeaderPrefix + "source"
	headerType        = HeaderPrefix + "type"
	headerDataSchema  = HeaderPrefix + "dataschema"
	headerSubject     = HeaderPrefix + "subject"
	headerTime        = HeaderPrefix + "time"
)

// extensionHeaders names the extensions' headers, once for the process.
var extensionHeaders = encoding.NewHeaderNames(HeaderPrefix)
