package httpsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kubewire/kubewire/encoding"
)

// header is r's header for net/http: the binding's, the static headers and
// the auth header.
func (s *Sink) header(r *request, auth []string) nethttp.Header {
	var h nethttp.Header
	if r.binary != nil {
		h = binaryHeader(r.binary, s.extra)
		for _, o := range s.overrides {
			h[o.header] = o.headerValue
		}
	} else {
		h = make(nethttp.Header, s.extra)
	}
	if r.contentType != nil {
		h[headerContentType] = r.contentType
	}
	for _, sh := range s.static {
		h[sh.name] = sh.values
	}
	if auth != nil {
		h[s.auth.name] = auth
	}
	return h
}

// post sends one request and maps its outcome to the Sink contract's
// errors (classify). events are what the body carries, for the error.
func (s *Sink) post(ctx context.Context, c *nethttp.Client, r *request, events []*encoding.Event) error {
	var auth []string
	if s.auth != nil {
		var err error
		if auth, err = s.auth.header(time.Now()); err != nil {
			return err
		}
	}
	var resp *nethttp.Response
	var err error
	if ct, ok := c.Transport.(*connTransport); ok {
		resp, err = s.postDirect(ctx, ct, r, auth)
	} else {
		resp, err = s.postClient(ctx, c, r, auth)
	}
	if err != nil {
		err = s.transportError(err)
		// The sink's own transport may see its connection's deadline pass
		// before the context's timer has fired; it reports it as the
		// context's.
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within the timeout (%s): %w", s.timeout, err)
		}
		return fmt.Errorf("http: POST %s (%s): %w", s.display, describe(events), err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		drain(resp)
		return nil
	}
	se := &StatusError{Code: resp.StatusCode}
	if loc := resp.Header.Get("Location"); loc != "" {
		se.Location = displayURL(loc)
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLimit))
	drain(resp)
	se.Body = s.auth.redact(printable(snippet))
	if s.auth != nil && (se.Code == nethttp.StatusUnauthorized || se.Code == nethttp.StatusForbidden) {
		s.auth.refused()
	}
	return classify(fmt.Errorf("http: POST %s (%s): %w", s.display, describe(events), se), se.Code)
}

// postClient sends r through net/http's Client: the path to a receiver
// behind a proxy.
func (s *Sink) postClient(ctx context.Context, c *nethttp.Client, r *request, auth []string) (*nethttp.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	req, err := nethttp.NewRequestWithContext(ctx, nethttp.MethodPost, s.rawURL, bytes.NewReader(r.body))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header = s.header(r, auth)
	resp, err := c.Do(req)
	if err != nil {
		// A deadline that passed is the timeout's even when the error
		// does not say so (a TLS alert written as the deadline passed).
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a request's context once its body is closed: the
// body is read under the request's timeout.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// postDirect writes r on one of the sink's own connections, with no
// *nethttp.Request in between: its header lines go from the event and the
// sink's settings straight into the connection's buffer. That saves
// building a header map (one slice per attribute), net/http's sorting and
// rewriting of it, and the Client's and the Request's bookkeeping, which
// were about a third of the sink's CPU per event on loopback
// (docs/benchmarks.md). TestTheDirectRequestIsTheRequestNetHTTPWrites holds
// it to what net/http would write.
func (s *Sink) postDirect(ctx context.Context, ct *connTransport, r *request, auth []string) (*nethttp.Response, error) {
	deadline := time.Now().Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c, err := ct.getBy(ctx, deadline)
	if err != nil {
		return nil, ctxError(ctx, err)
	}
	c.head = s.appendHead(c.head[:0], r, auth)
	return c.exchange(ctx, deadline, c.head, r.body)
}

// appendHead appends r's request line and header, up to and including the
// blank line that ends it, as net/http's Request.Write would write them
// (but in no particular order of fields): Host, the binding's headers, the
// static ones, the auth header, Content-Length.
func (s *Sink) appendHead(b []byte, r *request, auth []string) []byte {
	b = append(b, "POST "...)
	b = append(b, s.requestURI...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, s.host...)
	b = append(b, "\r\n"...)
	if ev := r.binary; ev != nil {
		b = appendField(b, headerSpecVersion, specVersionValue[0])
		b = encoding.AppendTextHeaders(b, ev)
		for _, o := range s.overrides {
			b = appendField(b, o.header, o.headerValue[0])
		}
	}
	if r.contentType != nil {
		b = appendField(b, headerContentType, r.contentType[0])
	}
	for _, sh := range s.static {
		b = appendField(b, sh.name, sh.values[0])
	}
	if auth != nil {
		b = appendField(b, s.auth.name, auth[0])
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(r.body)), 10)
	return append(b, "\r\n\r\n"...)
}

// appendField appends one header line. Every value was checked for control
// characters when it was configured or built; as net/http does, a line
// break would still become a space, and surrounding blanks are trimmed.
func appendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	value = textproto.TrimString(value)
	for {
		i := strings.IndexAny(value, "\r\n")
		if i < 0 {
			break
		}
		b = append(b, value[:i]...)
		b = append(b, ' ')
		value = value[i+1:]
	}
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// transportError drops net/http's *url.Error wrapper, whose message repeats
// the URL with its query, which may carry a key; the caller names the URL
// without it.
func (s *Sink) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// drain reads what is left of a response body, up to drainLimit, and
// closes it, so that the connection goes back to the pool.
func drain(resp *nethttp.Response) {
	if resp.ContentLength != 0 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	}
	_ = resp.Body.Close()
}

// describe names the events of a request in an error.
func describe(events []*encoding.Event) string {
	switch len(events) {
	case 0:
		return "no events"
	case 1:
		return "event " + events[0].ID()
	}
	return fmt.Sprintf("%d events, %s to %s", len(events), events[0].ID(), events[len(events)-1].ID())
}
