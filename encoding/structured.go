package encoding

import (
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// MarshalJSON writes the event in the JSON event format (structured mode).
func (e *Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// AppendJSON appends the event in the JSON event format to b, byte for
// byte as sdk-go's event.WriteJson writes the event's CloudEvent
// (TestAppendJSONIsWhatSDKGoWrites holds the two equal): the attributes in
// the spec's order, the data as it is when its media type is JSON (a
// string otherwise), then the extensions sorted by name. Writing it here
// rather than through CloudEvent spares the structured modes and stdout an
// sdk-go event, its map and its encoder per event.
func (e *Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"specversion":`...)
	b = appendJSONString(b, event.CloudEventsVersionV1)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, e.source)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.typ)
	if e.subject != "" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, e.subject)
	}
	if e.contentType != "" {
		b = append(b, `,"datacontenttype":`...)
		b = appendJSONString(b, e.contentType)
	}
	if e.dataSchema != "" {
		b = append(b, `,"dataschema":`...)
		b = appendJSONString(b, e.dataSchema)
	}
	if !e.time.IsZero() {
		b = append(b, `,"time":"`...)
		b = e.time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if len(e.data) > 0 {
		b = append(b, `,"data":`...)
		if isJSONMediaType(e.contentType) {
			b = append(b, e.data...)
		} else {
			b = appendJSONString(b, string(e.data))
		}
	}
	// Sorted without allocating: kubewire's extensions fit the array.
	var inline [inlineExtensions + 8]int
	order := inline[:0]
	for i := range e.Len() {
		order = append(order, i)
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(e.At(i).Name, e.At(j).Name) })
	for _, i := range order {
		x := e.At(i)
		b = append(b, ',')
		b = appendJSONString(b, x.Name)
		b = append(b, ':')
		b = appendJSONString(b, x.Value)
	}
	return append(b, '}')
}

// isJSONMediaType is whether sdk-go writes data of content type ct as JSON
// rather than as a string: its media type, lowercased and without
// parameters, is one of the JSON ones, or there is none.
func isJSONMediaType(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	for _, json := range [...]string{"", event.ApplicationJSON, event.TextJSON, event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON} {
		if strings.EqualFold(ct, json) {
			return true
		}
	}
	return false
}

// appendJSONString appends s as a JSON string, escaped as sdk-go's encoder
// (jsoniter, HTML escaping off) escapes it: quote, backslash and control
// characters; every other byte, UTF-8 or not, as it is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
