package nats

import (
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/encoding"
)

// HeaderPrefix is the prefix of every CloudEvents attribute header in binary
// mode. NATS header names are case-sensitive in nats.go, so we always write
// them lowercase, as the binding's examples do and as sdk-go's readers expect.
const HeaderPrefix = encoding.TextHeaderPrefix

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
func binaryMessage(subject string, ev *encoding.Event) *natsgo.Msg {
	h := make(natsgo.Header, 8+ev.Len())
	h[headerSpecVersion] = specVersionValue
	encoding.SetTextHeaders(h, ev)
	switch ct := ev.DataContentType(); ct {
	case "":
	case event.ApplicationJSON:
		h[headerDataContentType] = jsonContentType
	default:
		h[headerDataContentType] = []string{encoding.EncodeHeaderValue(ct)}
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: ev.Data()}
}

// Headers kubewire sets that SetTextHeaders does not.
const (
	headerSpecVersion     = HeaderPrefix + "specversion"
	headerDataContentType = HeaderPrefix + "datacontenttype"
)

// headerID is the id's header, which SetTextHeaders sets (msgID reads it).
const headerID = HeaderPrefix + "id"

// Values shared read-only by every message's header: nats.go only reads a
// message's header, and the sink replaces values rather than appending.
var (
	specVersionValue = []string{event.CloudEventsVersionV1}
	jsonContentType  = []string{event.ApplicationJSON}
)

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
