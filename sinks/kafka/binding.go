package kafka

import (
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// The names the CloudEvents Kafka protocol binding gives to headers.
const (
	// HeaderPrefix starts the header of every attribute in binary mode
	// (binding 3.2.3). The binding names them in lowercase.
	HeaderPrefix = "ce_"
	// HeaderContentType carries datacontenttype in binary mode (3.2.1) and
	// the event format's media type in structured mode (3.1.1). A reader
	// picks the mode by it: application/cloudevents... means structured.
	HeaderContentType = "content-type"
	// ContentTypeStructured is the media type of a structured-mode record.
	ContentTypeStructured = "application/cloudevents+json"
)

// EncodeMessage turns ev into a Kafka message in the given content mode,
// following the CloudEvents Kafka protocol binding. The key is the
// partitionkey extension (binding 3.3): one object, one key, one partition.
// Both modes are built straight from the event; a differential test holds
// each to what sdk-go's binding writes.
func EncodeMessage(ev *encoding.Event, structured bool) kafkago.Message {
	if !structured {
		return encodeBinary(ev)
	}
	m := kafkago.Message{Headers: structuredHeaders, Value: ev.AppendJSON(nil)}
	if pk, ok := ev.Lookup(encoding.ExtPartitionKey); ok {
		m.Key = []byte(pk)
	}
	return m
}

// structuredHeaders are a structured record's headers, shared read-only by
// every record: kafka-go only reads them.
var structuredHeaders = []kafkago.Header{{Key: HeaderContentType, Value: []byte(ContentTypeStructured)}}
