package nats

import (
	"fmt"

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
// It runs once per event and sink, so it names the headers of known
// attributes with constants and gives every header's value slice one
// shared backing array.
func binaryMessage(subject string, ev *encoding.Event) *natsgo.Msg {
	n := 8 + ev.Len()
	h := make(natsgo.Header, n)
	vals := make([]string, 0, n)
	set := func(name, v string) {
		vals = append(vals, encoding.EncodeHeaderValue(v))
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(headerSpecVersion, event.CloudEventsVersionV1)
	set(headerID, ev.ID())
	set(headerSource, ev.Source())
	set(headerType, ev.Type())
	if v := ev.Subject(); v != "" {
		set(headerSubject, v)
	}
	if t := ev.Time(); !t.IsZero() {
		set(headerTime, types.FormatTime(t))
	}
	if v := ev.DataContentType(); v != "" {
		set(headerDataContentType, v)
	}
	if v := ev.DataSchema(); v != "" {
		set(headerDataSchema, v)
	}
	for i := range ev.Len() {
		x := ev.At(i)
		set(extensionHeaders.Extension(x.Name), x.Value)
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: ev.Data()}
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
func structuredMessage(subject string, ev *encoding.Event) (*natsgo.Msg, error) {
	body, err := ev.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("marshal structured event: %w", err)
	}
	h := natsgo.Header{headerContentType: []string{ContentTypeStructured}}
	return &natsgo.Msg{Subject: subject, Header: h, Data: body}, nil
}
