package kafka

// The oracle of the direct encoding: sdk-go's binding package writing
// kafka-go Messages. TestTheDirectEncodingIsWhatSDKGoWritesInBothModes
// holds EncodeMessage to it; the sink itself never goes through sdk-go.

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// messageWriter fills a kafka-go Message from sdk-go's binding package, which
// walks the event and calls us once per attribute: we never decide ourselves
// which attributes exist or how their values are written as strings.
type messageWriter kafkago.Message

var (
	_ binding.BinaryWriter     = (*messageWriter)(nil)
	_ binding.StructuredWriter = (*messageWriter)(nil)
)

// SetStructuredEvent writes the whole event, in the format's media type, as
// the value.
func (w *messageWriter) SetStructuredEvent(_ context.Context, f format.Format, ev io.Reader) error {
	w.Headers = append(w.Headers[:0], kafkago.Header{Key: HeaderContentType, Value: []byte(f.MediaType())})
	return w.SetData(ev)
}

// Start resets the headers, so a writer can be reused for a retry.
func (w *messageWriter) Start(context.Context) error {
	w.Headers = w.Headers[:0]
	return nil
}

// End has nothing to flush.
func (w *messageWriter) End(context.Context) error { return nil }

// SetData writes the event's data, untouched, as the value.
func (w *messageWriter) SetData(r io.Reader) error {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return fmt.Errorf("read event data: %w", err)
	}
	w.Value = buf.Bytes()
	return nil
}

// SetAttribute maps a context attribute to its header: datacontenttype to
// content-type, every other one to ce_<name>.
func (w *messageWriter) SetAttribute(a spec.Attribute, value any) error {
	name := HeaderPrefix + a.Name()
	if a.Kind() == spec.DataContentType {
		name = HeaderContentType
	}
	return w.set(name, value)
}

// SetExtension maps an extension to ce_<name>.
func (w *messageWriter) SetExtension(name string, value any) error {
	return w.set(HeaderPrefix+name, value)
}

func (w *messageWriter) set(name string, value any) error {
	if value == nil {
		w.remove(name)
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return fmt.Errorf("header %s: %w", name, err)
	}
	w.Headers = append(w.Headers, kafkago.Header{Key: name, Value: []byte(s)})
	return nil
}

func (w *messageWriter) remove(name string) {
	for i, h := range w.Headers {
		if h.Key == name {
			w.Headers = append(w.Headers[:i], w.Headers[i+1:]...)
			return
		}
	}
}

// encodeWithSDK is EncodeMessage of sdk-go's event through sdk-go's
// binding: the oracle the direct encoding is tested against.
func encodeWithSDK(ev *event.Event, structured bool) (kafkago.Message, error) {
	ctx := binding.WithForceBinary(context.Background())
	if structured {
		ctx = binding.WithForceStructured(context.Background())
	}
	var m kafkago.Message
	if _, err := binding.Write(ctx, binding.ToMessage(ev), (*messageWriter)(&m), (*messageWriter)(&m)); err != nil {
		return kafkago.Message{}, fmt.Errorf("kafka binding of event %s: %w", ev.ID(), err)
	}
	if k, ok := ev.Extensions()[encoding.ExtPartitionKey]; ok {
		s, err := types.Format(k)
		if err != nil {
			return kafkago.Message{}, fmt.Errorf("partitionkey of event %s: %w", ev.ID(), err)
		}
		m.Key = []byte(s)
	}
	return m, nil
}
