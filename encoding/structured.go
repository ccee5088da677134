package encoding

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/tidwall/gjson"
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

// ParseJSON reads an event in the JSON event format, as AppendJSON writes
// it: the spool reads every record back with it. Anything it does not
// expect of kubewire's own output (another spec version, base64 data, an
// extension whose value is not a string) is read through sdk-go instead,
// so that any valid event reads back as FromCloudEvent would have it.
// TestParseJSONReadsWhatAppendJSONWrites holds the two readers equal.
func ParseJSON(b []byte) (*Event, error) {
	if !gjson.ValidBytes(b) {
		return nil, fmt.Errorf("encoding: the event is not valid JSON")
	}
	// The parse reads b in place. Every string the event keeps is copied
	// out of it on its own, so that the caller may reuse b and the event
	// holds its data once, not the whole record as well: a spool drain
	// keeps up to dispatch.bufferBytes of these, counted by their data.
	r := gjson.Parse(unsafe.String(unsafe.SliceData(b), len(b)))
	if !r.IsObject() {
		return nil, fmt.Errorf("encoding: the event is not a JSON object")
	}
	// The strings the event keeps go into one buffer of their own, which
	// the record's data, its bulk, is never part of.
	var small []byte
	if d := r.Get("data"); d.Exists() {
		small = make([]byte, 0, len(b)-len(d.Raw))
	} else {
		small = make([]byte, 0, len(b))
	}
	keep := func(s string) string {
		if len(s) > cap(small)-len(small) {
			return strings.Clone(s) // unescaping made it longer
		}
		small = append(small, s...)
		return unsafe.String(unsafe.SliceData(small[len(small)-len(s):]), len(s))
	}
	e := &Event{}
	var data gjson.Result
	ok, spec := true, false
	r.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.String && k.Str != "data" {
			ok = false
			return false
		}
		switch k.Str {
		case "specversion":
			ok, spec = v.Str == event.CloudEventsVersionV1, true
		case "id":
			e.id = keep(v.Str)
		case "source":
			e.source = keep(v.Str)
		case "type":
			e.typ = keep(v.Str)
		case "subject":
			e.subject = keep(v.Str)
		case "datacontenttype":
			e.contentType = keep(v.Str)
		case "dataschema":
			e.dataSchema = keep(v.Str)
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v.Str)
			e.time, ok = t, err == nil
		case "data":
			data = v
		case "data_base64":
			ok = false
		default:
			e.SetExtension(keep(k.Str), keep(v.Str))
		}
		return ok
	})
	if !ok || !spec {
		return parseWithSDK(b)
	}
	if data.Exists() {
		if isJSONMediaType(e.contentType) {
			e.data = []byte(data.Raw)
		} else if data.Type == gjson.String {
			e.data = []byte(data.Str)
		} else {
			return parseWithSDK(b)
		}
	}
	if e.id == "" || e.source == "" || e.typ == "" {
		return parseWithSDK(b) // sdk-go says what is missing
	}
	return e, nil
}

// parseWithSDK is ParseJSON through sdk-go's reader.
func parseWithSDK(b []byte) (*Event, error) {
	var ev event.Event
	if err := ev.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("encoding: read event: %w", err)
	}
	return FromCloudEvent(&ev)
}
