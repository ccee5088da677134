package nats

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

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

// EncodeHeaderValue percent-encodes an attribute's canonical string as the
// NATS binding (3.1.3.2) requires: space, double quote, percent and every
// byte outside printable ASCII (U+0021..U+007E) become %XY with upper-case
// hex, byte by byte of the UTF-8 encoding. Everything else is kept, so a
// plain value stays readable and readers that do not decode (sdk-go's) still
// see ordinary values unchanged.
func EncodeHeaderValue(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// mustEscape reports whether a byte of a UTF-8 string must be
// percent-encoded. Bytes of a multi-byte character are all >= 0x80, so
// encoding byte by byte is encoding each character's UTF-8 sequence.
func mustEscape(c byte) bool {
	return c == ' ' || c == '"' || c == '%' || c < 0x21 || c > 0x7e
}

// ErrBadHeaderValue is returned by DecodeHeaderValue for a value the binding
// says must be rejected.
var ErrBadHeaderValue = errors.New("invalid CloudEvents NATS header value")

// DecodeHeaderValue is the receiving side of the binding, for consumers
// written in Go and for our tests: it first removes RFC 7230 double-quoting
// (with backslash escapes), which older senders used, then performs one round
// of percent-decoding, accepting lower-case hex and needlessly encoded
// characters, and rejects a result that is not valid UTF-8 (such as the
// overlong %C0%A0).
func DecodeHeaderValue(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(v) && v[i] != '"'; i++ {
			if v[i] == '\\' {
				i++
				if i == len(v) {
					return "", fmt.Errorf("%w: quoted string ends in a backslash", ErrBadHeaderValue)
				}
			}
			b.WriteByte(v[i])
		}
		if i != len(v)-1 {
			return "", fmt.Errorf("%w: unterminated or trailing data after quoted string", ErrBadHeaderValue)
		}
		v = b.String()
	}
	if !strings.Contains(v, "%") {
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("%w: not UTF-8", ErrBadHeaderValue)
		}
		return v, nil
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", fmt.Errorf("%w: truncated percent-encoding at offset %d", ErrBadHeaderValue, i)
		}
		hi, ok1 := unhex(v[i+1])
		lo, ok2 := unhex(v[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: bad percent-encoding %q at offset %d", ErrBadHeaderValue, v[i:i+3], i)
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	if !utf8.Valid(out) {
		return "", fmt.Errorf("%w: percent-decoded bytes are not valid UTF-8", ErrBadHeaderValue)
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

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
		vals = append(vals, EncodeHeaderValue(v))
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
		s, isString := v.(string)
		if !isString {
			var err error
			if s, err = types.Format(v); err != nil {
				return nil, fmt.Errorf("extension %q: %w", name, err)
			}
		}
		set(extensionHeaders.Extension(name), s)
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: ev.Data()}, nil
}

// binaryMessageOf is binaryMessage through the event's accessors, for a
// context that is not 1.0; tests hold binaryMessage to it.
func binaryMessageOf(subject string, ev *event.Event) (*natsgo.Msg, error) {
	h := make(natsgo.Header, 8+len(ev.Extensions()))
	set := func(name, v string) { h[HeaderPrefix+name] = []string{EncodeHeaderValue(v)} }
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
