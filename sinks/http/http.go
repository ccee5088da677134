// Package httpsink is the sink that POSTs CloudEvents to an HTTP endpoint,
// as the CloudEvents HTTP protocol binding describes: binary mode (the
// default; every attribute in a ce- header, datacontenttype in
// Content-Type, the data as the body), structured mode (the JSON event as
// the body) or batched mode (a JSON array of structured events per
// request). With the K_SINK environment variable it follows Knative's
// source contract, so kubewire can stand in for Knative's ApiServerSource.
// docs/sinks/http.md is the user's guide.
//
// The package is named httpsink, not http, so that its own code and every
// importer can use net/http without renaming one or the other.
//
// A 2xx response acknowledges the request's events. The sink never
// retries: it reports each failure, and the dispatcher retries it (see
// classify for which are permanent). A Write sends its events one request
// after another, in slice order, and stops at the first failure, so no
// event of a key is sent after an earlier one of the same key failed; the
// dispatcher's shards are what make requests concurrent.
package httpsink

import (
	"bytes"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tlsfiles"
	"github.com/kubewire/kubewire/internal/base/version"
	"github.com/kubewire/kubewire/sinks"
)

// proxyFor picks the proxy of a request; tests replace it, since net/http
// reads the environment only once per process.
var proxyFor = nethttp.ProxyFromEnvironment

// Type is the config `type` of this sink.
const Type = "http"

// Spec is the HTTP sink type.
var Spec = sinks.NewSpec(Type, schema, New)

// schema is the JSON Schema of the http block, for the Helm chart.
//
//go:embed schema.json
var schema string

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("http: sink is closed")

// errNotConnected is returned by a Write before Connect succeeded.
var errNotConnected = errors.New("http: write before Connect")

// Transport settings. The request timeout (Config.Timeout) bounds each
// request as a whole; these bound its parts and the idle pool.
const (
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	// maxIdleConns is per host, and every request goes to one host. Each
	// dispatcher shard has at most one request in flight, so this covers
	// the default 16 shards several times over; net/http's default of 2
	// would close and reopen connections under load.
	maxIdleConns    = 64
	idleConnTimeout = 90 * time.Second
	// drainLimit is how much of a response body is read so that the
	// connection can be reused; a longer body costs the connection instead.
	drainLimit = 64 << 10
	// snippetLimit is how much of a refusal's body goes into the error.
	snippetLimit = 256
)

// Sink posts events to one URL. It is safe for the concurrent Writes of
// several dispatcher shards.
type Sink struct {
	name   string
	log    *slog.Logger
	target *url.URL
	rawURL string
	// requestURI and host are the request line's target and the Host
	// header, for the requests the sink writes itself.
	requestURI string
	host       string
	display    string
	mode       string
	batch      *Batch
	timeout    time.Duration
	tls        *TLS

	// static are the configured headers and the User-Agent, with canonical
	// names and values shared read-only by every request.
	static    []staticHeader
	auth      *secretHeader
	overrides []override
	// extra is how many headers a request carries besides the binding's.
	extra int

	mu        sync.Mutex
	client    *nethttp.Client
	transport interface{ CloseIdleConnections() }

	// live is the client once Connect succeeded, and nil again after
	// Close.
	live   atomic.Pointer[nethttp.Client]
	closed atomic.Bool
}

type staticHeader struct {
	name   string
	values []string
}

var _ sinks.Sink = (*Sink)(nil)

// New builds an HTTP sink from its block, defaulted here for a block built
// in code. The URL comes from the block or, when it has none, from K_SINK;
// K_CE_OVERRIDES is read here too. Nothing is dialled until Connect.
func New(name string, cfg *Config, deps sinks.Deps) (sinks.Sink, error) {
	c := cfg.Defaulted()
	raw, from := c.effectiveURL()
	if raw == "" {
		return nil, fmt.Errorf("http: no url, and the %s environment variable is not set", EnvSink)
	}
	u, why := parseTarget(raw)
	if why != "" {
		return nil, fmt.Errorf("http: the %s %s", from, why)
	}
	switch c.ContentMode {
	case config.ContentModeBinary, config.ContentModeStructured, ContentModeBatched:
	default:
		return nil, fmt.Errorf("http: unknown contentMode %q", c.ContentMode)
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		name:       name,
		log:        log.With("sink", name, "type", Type),
		target:     u,
		rawURL:     raw,
		requestURI: u.RequestURI(),
		host:       hostHeader(u),
		display:    displayURL(raw),
		mode:       c.ContentMode,
		timeout:    c.Timeout.Duration,
		tls:        c.TLS,
	}
	if c.ContentMode == ContentModeBatched {
		s.batch = c.Batch
	}
	if v := os.Getenv(EnvCEOverrides); v != "" {
		var err error
		if s.overrides, err = parseOverrides(v); err != nil {
			return nil, fmt.Errorf("http: the %s environment variable %w", EnvCEOverrides, err)
		}
	}
	headers := map[string]string{"User-Agent": "kubewire/" + version.Version}
	for k, v := range c.Headers {
		headers[nethttp.CanonicalHeaderKey(k)] = v
	}
	for k, v := range headers {
		s.static = append(s.static, staticHeader{k, []string{v}})
	}
	s.extra = len(s.static) + 1 // and the Content-Type of the modes that set it
	if c.Auth != nil {
		s.auth = newSecretHeader(c.Auth)
		s.extra++
	}
	if s.mode == config.ContentModeBinary {
		s.extra += len(s.overrides)
	}
	return s, nil
}

// newClient builds the HTTP client. A receiver reached directly, over
// http:// or https://, gets the sink's own connections (connTransport): one
// kept-alive HTTP/1.1 connection per concurrent Write, written and read by
// the Writing goroutine itself. A receiver behind a proxy (HTTPS_PROXY,
// HTTP_PROXY, NO_PROXY, read as every Go client reads them) goes through
// net/http's Transport, which speaks the proxy protocols and HTTP/2 when TLS
// negotiates it. Redirects are never followed.
func (s *Sink) newClient() (*nethttp.Client, interface{ CloseIdleConnections() }, error) {
	var tc *tls.Config
	if s.target.Scheme == "https" {
		var err error
		if tc, err = tlsConfig(s.tls); err != nil {
			return nil, nil, err
		}
	}
	if !s.proxied() {
		ct := newConnTransport(s.target, tc)
		return &nethttp.Client{Transport: ct, CheckRedirect: noRedirects}, ct, nil
	}
	tr := &nethttp.Transport{
		Proxy:       proxyFor,
		DialContext: (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		// Setting TLSClientConfig or DialContext turns net/http's HTTP/2
		// off unless asked for.
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          maxIdleConns,
		MaxIdleConnsPerHost:   maxIdleConns,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tc,
	}
	return &nethttp.Client{Transport: tr, CheckRedirect: noRedirects}, tr, nil
}

// hostHeader is the Host header net/http sends for u: its host and port,
// a name in ASCII (punycode), a literal IPv6 address without its zone.
func hostHeader(u *url.URL) string {
	host := strings.TrimSuffix(u.Host, ":")
	if h, err := httpguts.PunycodeHostPort(host); err == nil {
		host = h
	}
	if !strings.HasPrefix(host, "[") {
		return host
	}
	end := strings.LastIndex(host, "]")
	if zone := strings.LastIndex(host[:end], "%"); zone >= 0 {
		host = host[:zone] + host[end:]
	}
	return host
}

// proxied reports whether the environment sends requests to the target
// through a proxy. A proxy setting that cannot be parsed counts as one, so
// that net/http reports it on the first request as it always has.
func (s *Sink) proxied() bool {
	u, err := proxyFor(&nethttp.Request{URL: s.target})
	return err != nil || u != nil
}

// noRedirects returns a redirect to the caller instead of following it. A
// 301, 302 or 303 would turn the POST into a GET without a body, whose 2xx
// would acknowledge events nobody received, and a redirect to another host
// would carry the auth header there. A redirect is a wrong url; it is
// retried (classify) until the configuration is fixed.
func noRedirects(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }

// Connect builds the client (reading the TLS files and the auth file, so
// a missing one is reported before the first change) and checks that the
// receiver answers, with an OPTIONS request: any HTTP response will do, as
// Knative's data plane contract asks of senders that probe; only a failure
// to reach the receiver at all (DNS, refused, TLS) fails. A failure is
// counted in kubewire_sink_connect_failures_total by reason.
func (s *Sink) Connect(ctx context.Context) error {
	err := s.connect(ctx)
	if err != nil && !errors.Is(err, ErrClosed) {
		metrics.SinkConnectFailures.WithLabelValues(s.name, connectReason(err)).Inc()
	}
	return err
}

func (s *Sink) connect(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("http: connect after Close: %w", ErrClosed)
	}
	s.mu.Lock()
	if s.client == nil {
		c, tr, err := s.newClient()
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.client, s.transport = c, tr
	}
	c := s.client
	s.mu.Unlock()

	var auth []string
	if s.auth != nil {
		var err error
		if auth, err = s.auth.header(time.Now()); err != nil {
			return err
		}
	}
	h := s.header(&request{}, auth)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := nethttp.NewRequestWithContext(ctx, nethttp.MethodOptions, s.rawURL, nil)
	if err != nil {
		return fmt.Errorf("http: %s: %w", s.display, err)
	}
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("http: connect to %s: %w", s.display, s.transportError(err))
	}
	drain(resp)
	if s.closed.Load() {
		return fmt.Errorf("http: connect after Close: %w", ErrClosed)
	}
	s.live.Store(c)
	return nil
}

// connectReason names a failed connect for kubewire_sink_connect_failures_total.
func connectReason(err error) string {
	var ne net.Error
	switch {
	case tlsfiles.IsTLSError(err):
		return metrics.ConnectTLS
	case errors.As(err, &ne), errors.Is(err, context.DeadlineExceeded):
		return metrics.ConnectNetwork
	}
	return metrics.ConnectOther
}

// Write posts the events in order and reports each one's outcome (see
// sinks.Sink). A refused event is refused alone and the Write goes on; any
// other failure stops it, and every event after the failed ones is reported
// not sent, so no later change of a key can overtake an earlier one.
func (s *Sink) Write(ctx context.Context, events []*encoding.Event) error {
	c := s.live.Load()
	if c == nil {
		if s.closed.Load() {
			return fmt.Errorf("http: write after Close: %w", ErrClosed)
		}
		return errNotConnected
	}
	res := sinks.NewBatchError(len(events))
	if s.batch != nil {
		s.writeBatched(ctx, c, events, res)
		return res.ErrorOrNil()
	}
	for i, ev := range events {
		if err := s.deliver(ctx, c, ev, nil); err != nil && !failed(res, i, i+1, err) {
			break
		}
	}
	return res.ErrorOrNil()
}

// failed records err for the events from..to-1 of res. It reports whether
// the Write may go on: a permanent refusal holds back nothing, while after
// any other failure every later event is recorded as not sent.
func failed(res *sinks.BatchError, from, to int, err error) bool {
	for i := from; i < to; i++ {
		res.Failed(i, err)
	}
	if errors.Is(err, sinks.ErrPermanent) {
		return true
	}
	for i := to; i < res.Len(); i++ {
		res.Failed(i, sinks.ErrNotSent)
	}
	return false
}

// writeBatched packs consecutive events into requests of at most
// batch.maxEvents events and batch.maxBytes bytes, in order. A request the
// receiver refuses (as too large, or for good) is sent again one event per
// request, since none of its events was taken and the receiver did not say
// which one it refused; an event alone too large goes as its reference
// event.
func (s *Sink) writeBatched(ctx context.Context, c *nethttp.Client, events []*encoding.Event, res *sinks.BatchError) {
	bodies := make([][]byte, len(events))
	for i, ev := range events {
		b, err := structuredBody(s.withOverrides(ev))
		if err != nil {
			// Retrying cannot change how an event encodes; it is left
			// out of every request.
			res.Failed(i, sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err)))
			continue
		}
		bodies[i] = b
	}
	one := func(i int) bool {
		if err := s.deliver(ctx, c, events[i], bodies[i]); err != nil {
			return failed(res, i, i+1, err)
		}
		return true
	}
	for start := 0; start < len(events); {
		if bodies[start] == nil {
			start++
			continue
		}
		end, size := start+1, 2+len(bodies[start])
		for end < len(events) && bodies[end] != nil && end-start < s.batch.MaxEvents && size+1+len(bodies[end]) <= s.batch.MaxBytes {
			size += 1 + len(bodies[end])
			end++
		}
		if end-start == 1 {
			if !one(start) {
				return
			}
			start = end
			continue
		}
		r := &request{contentType: batchValue, body: batchBody(bodies[start:end])}
		err := s.post(ctx, c, r, events[start:end])
		switch {
		case err == nil:
		case errors.Is(err, sinks.ErrTooLarge), errors.Is(err, sinks.ErrPermanent):
			for i := start; i < end; i++ {
				if !one(i) {
					return
				}
			}
		default:
			failed(res, start, end, err)
			return
		}
		start = end
	}
}

// deliver sends one event; if the receiver refuses it as too large, its
// reference event goes in its place (encoding.ReferenceEvent: the same id,
// data that only names the object). Nothing newer of its key has been sent
// meanwhile, so the key's order holds. Only a reference refused as well, or
// an event that has none, is a permanent failure. structured, when not nil,
// is ev already in the JSON event format.
func (s *Sink) deliver(ctx context.Context, c *nethttp.Client, ev *encoding.Event, structured []byte) error {
	err := s.send(ctx, c, ev, structured)
	if err == nil || !errors.Is(err, sinks.ErrTooLarge) || errors.Is(err, sinks.ErrPermanent) {
		return err
	}
	ref, rerr := encoding.ReferenceEvent(ev)
	if rerr != nil {
		return sinks.Permanent(fmt.Errorf("%w, and %w", err, rerr))
	}
	switch rerr := s.send(ctx, c, ref, nil); {
	case rerr == nil:
		s.log.Warn("event too large for the receiver; sent a reference to the object instead",
			"id", ev.ID(), "partitionkey", ev.Extension(encoding.ExtPartitionKey), "bytes", len(ev.Data()), "err", err)
		return nil
	case errors.Is(rerr, sinks.ErrTooLarge):
		return sinks.Permanent(fmt.Errorf("http: event %s is too large for the receiver even as a reference: %w", ev.ID(), rerr))
	default:
		return rerr
	}
}

// send posts one event in the sink's content mode; the batched mode sends
// it as a batch of one, so that the receiver sees one format.
func (s *Sink) send(ctx context.Context, c *nethttp.Client, ev *encoding.Event, structured []byte) error {
	one := [1]*encoding.Event{ev}
	if s.mode == config.ContentModeBinary {
		ct, err := binaryContentType(ev)
		if err != nil {
			return sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err))
		}
		return s.post(ctx, c, &request{binary: ev, contentType: ct, body: ev.Data()}, one[:])
	}
	if structured == nil {
		var err error
		if structured, err = structuredBody(s.withOverrides(ev)); err != nil {
			return sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err))
		}
	}
	r := &request{contentType: structuredValue, body: structured}
	if s.mode == ContentModeBatched {
		r.contentType, r.body = batchValue, batchBody([][]byte{structured})
	}
	return s.post(ctx, c, r, one[:])
}

// withOverrides is ev with K_CE_OVERRIDES' extensions, for the structured
// formats; binary mode adds their headers instead and needs no copy.
func (s *Sink) withOverrides(ev *encoding.Event) *encoding.Event {
	if len(s.overrides) == 0 {
		return ev
	}
	c := ev.Clone()
	for _, o := range s.overrides {
		c.SetExtension(o.name, o.value)
	}
	return c
}

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

// Close releases the idle connections; later Writes fail with ErrClosed.
// Closing twice is harmless.
func (s *Sink) Close(context.Context) error {
	s.closed.Store(true)
	s.live.Store(nil)
	s.mu.Lock()
	tr := s.transport
	s.mu.Unlock()
	if tr != nil {
		tr.CloseIdleConnections()
	}
	return nil
}
