package nats

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/encoding"
)

// HeaderPrefix is the prefix of every CloudEvents attribute header in binary
// mode. NATS header names are case-sensitive in nats.go, so we always write
// them lowercase, as the binding's examples do and as sdk-go's readers expect.
const HeaderPrefix = "ce-"

// ContentTypeStructured is the Content-Type of a structured-mode message. The
// binding tells a receiver to treat a message as structured when its
// Content-Type starts with application/cloudevents.
const ContentTypeStructured = "application/cloudevents+json"

// headerContentType is the header that marks structured mode. Binary mode
// never sets it: the binding maps datacontenttype to ce-datacontenttype like
// every other attribute, so a Content-Type would flip a reader to structured.
const headerContentType = "Content-Type"

// binaryMessage maps ev to a binary-mode message: every attribute, extensions
// included, in its own ce- header with a percent-encoded value; the data,
// untouched, as the body.
//
// It runs once per event and sink, so it reads a 1.0 context's fields and
// extensions map directly (ev.Extensions() copies the map on every call),
// names the headers of known attributes with constants, and gives every
// header's value slice one shared backing array.
func binaryMessage(subject string, ev *event.Event) (*natsgo.Msg, error) {
	c, ok := ev.Context.(*event.EventContextV1)
	if !ok {
		return binaryMessageOf(subject, ev)
	}
	n := 4 + len(c.Extensions)
	for _, set := range []bool{c.Subject != nil, c.Time != nil, c.DataContentType != nil, c.DataSchema != nil} {
		if set {
			n++
		}
	}
	h := make(natsgo.Header, n)
	vals := make([]string, 0, n)
	set := func(name, v string) {
		vals = append(vals, encoding.EncodeHeaderValue(v))
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(headerSpecVersion, event.CloudEventsVersionV1)
	set(headerID, c.ID)
	set(headerSource, c.Source.String())
	set(headerType, c.Type)
	if c.Subject != nil && *c.Subject != "" {
		set(headerSubject, *c.Subject)
	}
	if c.Time != nil && !c.Time.IsZero() {
		set(headerTime, types.FormatTime(c.Time.Time))
	}
	if c.DataContentType != nil && *c.DataContentType != "" {
		set(headerDataContentType, *c.DataContentType)
	}
	if c.DataSchema != nil {
		if v := c.DataSchema.String(); v != "" {
			set(headerDataSchema, v)
		}
	}
	for name, v := range c.Extensions {
		s, err := encoding.ExtensionValue(v)
		if err != nil {
			return nil, fmt.Errorf("extension %q: %w", name, err)
		}
		set(extensionHeaders.Extension(name), s)
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: ev.Data()}, nil
}

// binaryMessageOf is binaryMessage through the event's accessors, for a
// context that is not 1.0; tests hold binaryMessage to it.
func binaryMessageOf(subject string, ev *event.Event) (*natsgo.Msg, error) {
	h := make(natsgo.Header, 8+len(ev.Extensions()))
	set := func(name, v string) { h[HeaderPrefix+name] = []string{encoding.EncodeHeaderValue(v)} }
	set("specversion", ev.SpecVersion())
	set("id", ev.ID())
	set("source", ev.Source())
	set("type", ev.Type())
	if v := ev.Subject(); v != "" {
		set("subject", v)
	}
	if t := ev.Time(); !t.IsZero() {
		set("time", types.FormatTime(t))
	}
	if v := ev.DataContentType(); v != "" {
		set("datacontenttype", v)
	}
	if v := ev.DataSchema(); v != "" {
		set("dataschema", v)
	}
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			return nil, fmt.Errorf("extension %q: %w", name, err)
		}
		set(strings.ToLower(name), s)
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: ev.Data()}, nil
}

// Header names of the spec's attributes in binary mode.
const (
	headerSpecVersion     = HeaderPrefix + "specversion"
	headerID              = HeaderPrefix + "id"
	headerSource          = HeaderPrefix + "source"
	headerType            = HeaderPrefix + "type"
	headerSubject         = HeaderPrefix + "subject"
	headerTime            = HeaderPrefix + "time"
	headerDataContentType = HeaderPrefix + "datacontenttype"
	headerDataSchema      = HeaderPrefix + "dataschema"
)

// extensionHeaders names the extensions' headers, once for the process.
var extensionHeaders = encoding.NewHeaderNames(HeaderPrefix)

// structuredMessage maps ev to a structured-mode message: the JSON event
// format as the body.
func structuredMessage(subject string, ev *event.Event) (*natsgo.Msg, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("marshal structured event: %w", err)
	}
	h := natsgo.Header{headerContentType: []string{ContentTypeStructured}}
	return &natsgo.Msg{Subject: subject, Header: h, Data: body}, nil
}
