package httpsink

import (
	"fmt"
	nethttp "net/http"
	"strings"

	"github.com/kubewire/kubewire/sinks"
)

// printable makes a response body fit for a log line: valid UTF-8 on one
// line.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(b) == snippetLimit {
		s += "…"
	}
	return s
}

// StatusError is a response that is not 2xx.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Location is where a redirect pointed, without its query.
	Location string
	// Body is the start of the response body, with the auth secret removed.
	Body string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Code, nethttp.StatusText(e.Code))
	if e.Code >= 300 && e.Code < 400 {
		msg += "; redirects are not followed, set url to the address the receiver redirects to"
		if e.Location != "" {
			msg += " (" + e.Location + ")"
		}
	}
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// classify maps a response that is not 2xx to the Sink contract:
//
//   - 413 Content Too Large: sinks.TooLarge, so that the event goes as its
//     reference event (deliver) or a batch one event per request.
//   - 401, 403, 404, 408, 409, 425, 429, every 5xx, 3xx (redirects are not
//     followed) and anything else unexpected: a plain error, which the
//     dispatcher retries with backoff. 404 and 409 are retried as Knative's
//     data plane contract asks (a broker not ready yet answers 404);
//     credentials refused (401, 403) are retried because the cure is in the
//     cluster (a rotated token, a granted permission), not in the event, and
//     dropping events while it comes would break at-least-once, as a missing
//     Kafka ACL or NATS permission blocks a sink rather than drops.
//   - every other 4xx (400 first of all): sinks.Permanent. The receiver
//     refuses the event itself; the dispatcher drops it, logs and counts it,
//     and the key keeps flowing.
func classify(err error, code int) error {
	switch {
	case code == nethttp.StatusRequestEntityTooLarge:
		return sinks.TooLarge(err)
	case retryableStatus(code):
		return err
	case code >= 400 && code < 500:
		return sinks.Permanent(err)
	}
	return err
}

func retryableStatus(code int) bool {
	switch code {
	case nethttp.StatusUnauthorized, nethttp.StatusForbidden, nethttp.StatusNotFound, nethttp.StatusRequestTimeout,
		nethttp.StatusConflict, nethttp.StatusTooEarly, nethttp.StatusTooManyRequests:
		return true
	}
	return code < 400 || code >= 500
}
