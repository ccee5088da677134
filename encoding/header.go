package encoding

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Header values of the binary-mode bindings that carry attributes in
// text headers (NATS, HTTP): both percent-encode the same way.

// EncodeHeaderValue percent-encodes an attribute's canonical string as the
// NATS and HTTP bindings (3.1.3.2) require: space, double quote, percent and every
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
	return string(appendHeaderValue(make([]byte, 0, len(s)+2*n), s))
}

// appendHeaderValue appends s to b percent-encoded as EncodeHeaderValue
// encodes it.
func appendHeaderValue(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	i := 0
	for i < len(s) && !mustEscape(s[i]) {
		i++
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if mustEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// mustEscape reports whether a byte of a UTF-8 string must be
// percent-encoded. Bytes of a multi-byte character are all >= 0x80, so
// encoding byte by byte is encoding each character's UTF-8 sequence.
func mustEscape(c byte) bool {
	return c == ' ' || c == '"' || c == '%' || c < 0x21 || c > 0x7e
}

// ErrBadHeaderValue is returned by DecodeHeaderValue for a value the binding
// says must be rejected.
var ErrBadHeaderValue = errors.New("invalid CloudEvents header value")

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

// TextHeaderPrefix starts every attribute's header in the binary modes of
// the NATS and HTTP bindings. Both write the names lowercase: NATS header
// names are case-sensitive and sdk-go's readers expect them so, and
// net/http canonicalises them on the receiving side.
const TextHeaderPrefix = "ce-"

// textHeaders names the attributes' headers, once for the process.
var textHeaders = NewHeaderNames(TextHeaderPrefix)

// TextExtensionHeader is the binary-mode header of extension name in the
// NATS and HTTP bindings.
func TextExtensionHeader(name string) string { return textHeaders.Extension(name) }

// SetTextHeaders sets in h (a nats.Header or an http.Header) the
// binary-mode header of each of ev's attributes, with its value
// percent-encoded: id, source, type, subject, time and dataschema, then
// every extension. The values share one backing array. specversion and
// datacontenttype are the caller's: NATS gives them ce- headers, HTTP
// carries datacontenttype in Content-Type.
func SetTextHeaders[H ~map[string][]string](h H, ev *Event) {
	vals := make([]string, 0, 6+ev.Len())
	set := func(name, v string) {
		vals = append(vals, EncodeHeaderValue(v))
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	eachTextHeader(ev, set, func(name string, t time.Time) { set(name, t.Format(time.RFC3339Nano)) })
}

// AppendTextHeaders appends to b the headers SetTextHeaders sets, as
// header lines ("ce-id: value\r\n", the form HTTP/1.1 and NATS share), for
// a sink that writes its requests itself. It allocates only to grow b.
func AppendTextHeaders(b []byte, ev *Event) []byte {
	eachTextHeader(ev, func(name, v string) {
		b = append(b, name...)
		b = append(b, ": "...)
		b = appendHeaderValue(b, v)
		b = append(b, "\r\n"...)
	}, func(name string, t time.Time) {
		b = append(b, name...)
		b = append(b, ": "...)
		b = t.AppendFormat(b, time.RFC3339Nano) // nothing in it to escape
		b = append(b, "\r\n"...)
	})
	return b
}

// eachTextHeader calls set with each attribute's header and value, in the
// order SetTextHeaders documents, and setTime with the time, which callers
// format as they can afford.
func eachTextHeader(ev *Event, set func(name, v string), setTime func(name string, t time.Time)) {
	set(textHeaders.ID, ev.ID())
	set(textHeaders.Source, ev.Source())
	set(textHeaders.Type, ev.Type())
	if v := ev.Subject(); v != "" {
		set(textHeaders.Subject, v)
	}
	if t := ev.Time(); !t.IsZero() {
		setTime(textHeaders.Time, t.UTC())
	}
	if v := ev.DataSchema(); v != "" {
		set(textHeaders.DataSchema, v)
	}
	for i := range ev.Len() {
		x := ev.At(i)
		set(textHeaders.Extension(x.Name), x.Value)
	}
}
