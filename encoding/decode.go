package encoding

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
)

// Header is one header of a broker message, its value already decoded from
// any broker-specific escaping.
type Header struct{ Key, Value string }

// Decode reads the CloudEvent in a broker message, as the Kafka and NATS
// protocol bindings define it: structured mode when the content type is
// application/cloudevents(+json), else binary mode with the attributes in
// headers named prefix+attribute ("ce_" for Kafka, "ce-" for NATS) and the
// data in the body. sdk-go does the mapping of names to attributes and the
// parsing of typed attributes such as time.
func Decode(headers []Header, prefix string, body []byte) (*event.Event, error) {
	m := &message{headers: headers, prefix: prefix, body: body, specs: spec.WithPrefix(prefix)}
	for _, h := range headers {
		if strings.EqualFold(h.Key, "content-type") {
			m.contentType = h.Value
		}
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("decode CloudEvent: %w", err)
	}
	return ev, nil
}

type message struct {
	headers     []Header
	prefix      string
	body        []byte
	contentType string
	specs       *spec.Versions
}

func (m *message) ReadEncoding() binding.Encoding {
	if format.Lookup(m.contentType) != nil {
		return binding.EncodingStructured
	}
	for _, h := range m.headers {
		if strings.EqualFold(h.Key, m.prefix+"specversion") {
			return binding.EncodingBinary
		}
	}
	return binding.EncodingUnknown
}

func (m *message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.contentType)
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.body))
}

func (m *message) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	version := m.version()
	if version == nil {
		return binding.ErrNotBinary
	}
	for _, h := range m.headers {
		key := strings.ToLower(h.Key)
		switch {
		case key == "content-type":
			if err := w.SetAttribute(version.AttributeFromKind(spec.DataContentType), h.Value); err != nil {
				return err
			}
		case strings.HasPrefix(key, m.prefix):
			if a := version.Attribute(key); a != nil {
				if err := w.SetAttribute(a, h.Value); err != nil {
					return err
				}
			} else if err := w.SetExtension(strings.TrimPrefix(key, m.prefix), h.Value); err != nil {
				return err
			}
		}
	}
	if len(m.body) > 0 {
		return w.SetData(bytes.NewReader(m.body))
	}
	return nil
}

func (m *message) Finish(error) error { return nil }

// version returns the spec version named by the specversion header.
func (m *message) version() spec.Version {
	if v, ok := m.header(m.prefix + "specversion"); ok {
		return m.specs.Version(v)
	}
	return nil
}

func (m *message) header(name string) (string, bool) {
	for _, h := range m.headers {
		if strings.EqualFold(h.Key, name) {
			return h.Value, true
		}
	}
	return "", false
}

// GetAttribute and GetExtension make message a binding.MessageMetadataReader,
// which sdk-go needs to read binary messages.
func (m *message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if k == spec.DataContentType && m.contentType != "" {
		return a, m.contentType
	}
	if val, ok := m.header(a.PrefixedName()); ok {
		return a, val
	}
	return a, nil
}

func (m *message) GetExtension(name string) any {
	if val, ok := m.header(m.prefix + name); ok {
		return val
	}
	return nil
}
