package httpsink

import (
	"fmt"
	nethttp "net/http"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
)

// The CloudEvents HTTP protocol binding, built directly: sdk-go's
// binding.Write boxes every attribute, copies the extensions map on each
// lookup and allocates every header name, which is most of the cost of a
// request on loopback. TestSDKGoReadsWhatTheSinkSends holds what we build
// to what sdk-go's own receiver decodes.

// Attribute headers in binary mode are encoding's text headers ("ce-",
// lowercase, as the binding's examples write them and as HTTP/2 sends every
// name); net/http on the receiving side canonicalises them (Ce-Id) before
// sdk-go or anyone else looks.

// Media types of the structured and batched modes. Receivers (sdk-go's
// included) pick the mode from the Content-Type, so neither carries
// parameters.
const (
	ContentTypeStructured = "application/cloudevents+json"
	ContentTypeBatch      = "application/cloudevents-batch+json"
)

// Headers kubewire sets that encoding.SetTextHeaders does not.
const (
	headerSpecVersion = encoding.TextHeaderPrefix + "specversion"
	headerContentType = "Content-Type"
)

// Values shared read-only by every request's header; net/http never
// modifies a request's header.
var (
	specVersionValue = []string{event.CloudEventsVersionV1}
	jsonContentType  = []string{event.ApplicationJSON}
	structuredValue  = []string{ContentTypeStructured}
	batchValue       = []string{ContentTypeBatch}
)

// request is one POST's own part: the binary-mode event whose attributes
// become headers (nil in the structured modes), the Content-Type, and the
// body. The sink adds its static and auth headers.
type request struct {
	binary      *encoding.Event
	contentType []string // nil for none
	body        []byte
}

// binaryContentType is the Content-Type of ev in binary mode: its
// datacontenttype, nil when it has none.
func binaryContentType(ev *encoding.Event) ([]string, error) {
	switch ct := ev.DataContentType(); {
	case ct == "":
		return nil, nil
	case ct == event.ApplicationJSON:
		return jsonContentType, nil
	case checkHeaderValue(ct) != "":
		return nil, fmt.Errorf("datacontenttype %q cannot be a Content-Type header", ct)
	default:
		return []string{ct}, nil
	}
}

// binaryHeader maps ev to binary-mode headers for net/http: one ce- header
// per attribute and extension. extra is how many more headers the caller
// adds, so that the map is sized once.
func binaryHeader(ev *encoding.Event, extra int) nethttp.Header {
	h := make(nethttp.Header, 8+ev.Len()+extra)
	h[headerSpecVersion] = specVersionValue
	encoding.SetTextHeaders(h, ev)
	return h
}

// structuredBody is ev in the JSON event format. It calls the event's
// MarshalJSON itself: json.Marshal would validate and compact its output
// once more, byte by byte, which takes longer than writing it (the data is
// JSON already and is copied as it is).
func structuredBody(ev *encoding.Event) ([]byte, error) {
	b, err := ev.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("marshal structured event: %w", err)
	}
	return b, nil
}

// batchBody joins structured events into a JSON batch: an array of them.
func batchBody(events [][]byte) []byte {
	n := 2
	for _, e := range events {
		n += len(e) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, ']')
}
