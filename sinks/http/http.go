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
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

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
