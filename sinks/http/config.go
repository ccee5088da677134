package httpsink

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
)

// ContentModeBatched sends many events in one request, as a JSON array of
// structured events (the CloudEvents JSON batch format). Binary and
// structured are config.ContentModeBinary and config.ContentModeStructured.
const ContentModeBatched = "batched"

// HTTP defaults and limits. docs/sinks/http.md explains them.
const (
	// DefaultTimeout bounds one request, from dialling to the end of the
	// response.
	DefaultTimeout = 30 * time.Second
	// DefaultBatchMaxEvents is the dispatcher's default batch size, so one
	// Write usually becomes one request.
	DefaultBatchMaxEvents = 100
	MaxBatchMaxEvents     = 10000
	// DefaultBatchMaxBytes stays well under the 1 MiB body limit that
	// common proxies apply by default (nginx's client_max_body_size), so an
	// ordinary batch is not refused for its size on the way.
	DefaultBatchMaxBytes = 512 << 10
	// DefaultAuthHeader is the header auth sets unless told otherwise.
	DefaultAuthHeader = "Authorization"
)

// Knative's environment contract for sources (SinkBinding and
// ContainerSource set both variables on the pods they bind).
const (
	// EnvSink holds the URL of the sink to send to. kubewire uses it when a
	// sink's url is unset.
	EnvSink = "K_SINK"
	// EnvCEOverrides holds JSON of the form {"extensions": {"name":
	// "value"}}: extensions to add to every event.
	EnvCEOverrides = "K_CE_OVERRIDES"
)

// Config configures a sink of type "http". Zero values mean the documented
// default; Defaulted returns a copy with them filled in.
type Config struct {
	// URL is where events are POSTed, http:// or https://. Default: the
	// K_SINK environment variable; one of the two is required.
	// Credentials do not belong in the URL: use Auth.
	URL string `json:"url,omitempty"`
	// ContentMode is "binary" (default), "structured" or "batched".
	ContentMode string `json:"contentMode,omitempty"`
	// Batch bounds the requests of the batched mode. Only with
	// contentMode batched.
	Batch *Batch `json:"batch,omitempty"`
	// Timeout bounds one request. Default 30s.
	Timeout config.Duration `json:"timeout"`
	// TLS configures TLS for an https:// URL. Without it the system roots
	// verify the server.
	TLS *TLS `json:"tls,omitempty"`
	// Auth adds a header whose value is read from a file: a bearer token,
	// an API key.
	Auth *Auth `json:"auth,omitempty"`
	// Headers are extra headers sent, as they are, with every request. They
	// may not hold secrets (use Auth) nor replace the headers the binding
	// owns (ce-*, Content-Type).
	Headers map[string]string `json:"headers,omitempty"`
}

// Batch bounds one request of the batched mode.
type Batch struct {
	// MaxEvents is the most events in one request. Default 100.
	MaxEvents int `json:"maxEvents,omitempty"`
	// MaxBytes bounds the body of one request. Default 512 KiB. A single
	// event larger than this still goes, alone.
	MaxBytes int `json:"maxBytes,omitempty"`
}

// TLS configures TLS to the receiver.
type TLS = config.TLS

// Auth is a header whose value is a secret read from a file. The value is
// never written in the configuration and never logged.
type Auth struct {
	// Header is the header's name. Default "Authorization".
	Header string `json:"header,omitempty"`
	// Scheme, when set, goes before the file's content with one space
	// between: "Bearer" sends "Bearer <token>", as a Kubernetes projected
	// service account token needs.
	Scheme string `json:"scheme,omitempty"`
	// ValueFile holds the value (or the credentials after Scheme). Its
	// trailing line ending is dropped. It is read again when it changes.
	// Required.
	ValueFile string `json:"valueFile"`
}

// Defaulted returns a copy of c with every unset field at its default. The
// copy shares no maps or pointers with c. The URL stays as written: K_SINK
// is read when the sink is built.
func (c *Config) Defaulted() Config {
	d := *c
	d.ContentMode = cmp.Or(d.ContentMode, config.ContentModeBinary)
	d.Timeout.Default(DefaultTimeout)
	d.Batch = nil
	if c.Batch != nil || d.ContentMode == ContentModeBatched {
		b := config.CopyOr(c.Batch, Batch{})
		b.MaxEvents = cmp.Or(b.MaxEvents, DefaultBatchMaxEvents)
		b.MaxBytes = cmp.Or(b.MaxBytes, DefaultBatchMaxBytes)
		d.Batch = b
	}
	d.TLS = config.Clone(c.TLS)
	if c.Auth != nil {
		a := *c.Auth
		a.Header = cmp.Or(a.Header, DefaultAuthHeader)
		d.Auth = &a
	}
	if c.Headers != nil {
		d.Headers = make(map[string]string, len(c.Headers))
		for k, v := range c.Headers {
			d.Headers[k] = v
		}
	}
	return d
}

// Default fills in every unset field; see Defaulted.
func (c *Config) Default() { *c = c.Defaulted() }

// effectiveURL is the URL the sink posts to and where it comes from: the
// url field, else K_SINK.
func (c *Config) effectiveURL() (u, from string) {
	if c.URL != "" {
		return c.URL, "url"
	}
	return os.Getenv(EnvSink), EnvSink
}

// Validate checks the block. The url may be left to K_SINK, which is read
// from kubewire's environment, so a config that relies on it validates only
// where K_SINK is set (in the bound pod). No rule depends on the routed
// resources.
func (c *Config) Validate(p *field.Path, _ []config.Route) field.ErrorList {
	var errs field.ErrorList
	up := p.Child("url")
	raw, from := c.effectiveURL()
	var target *url.URL
	switch {
	case raw == "":
		errs = append(errs, field.Required(up, fmt.Sprintf(
			`an http:// or https:// URL such as "http://receiver.ns.svc/events", or the %s environment variable (a Knative SinkBinding sets it)`, EnvSink)))
	default:
		var why string
		target, why = parseTarget(raw)
		if why != "" {
			bad := any(raw)
			if strings.Contains(why, "credentials") {
				bad = field.OmitValueType{} // never echo a credential
			}
			if from == EnvSink {
				why = fmt.Sprintf("is unset, and the %s environment variable it falls back to %s", EnvSink, why)
			}
			errs = append(errs, field.Invalid(up, bad, why))
		}
	}

	switch c.ContentMode {
	case "", config.ContentModeBinary, config.ContentModeStructured, ContentModeBatched:
	default:
		errs = append(errs, field.NotSupported(p.Child("contentMode"), c.ContentMode,
			[]string{config.ContentModeBinary, config.ContentModeStructured, ContentModeBatched}))
	}
	if b := c.Batch; b != nil {
		bp := p.Child("batch")
		mode := c.ContentMode
		if mode == "" {
			mode = config.ContentModeBinary
		}
		if mode != ContentModeBatched {
			errs = append(errs, field.Forbidden(bp, fmt.Sprintf(
				"may only be set when contentMode is %q (contentMode is %q)", ContentModeBatched, mode)))
		}
		if b.MaxEvents != 0 {
			errs = append(errs, config.ValidateRange(bp.Child("maxEvents"), b.MaxEvents, 1, MaxBatchMaxEvents)...)
		}
		if b.MaxBytes < 0 {
			errs = append(errs, field.Invalid(bp.Child("maxBytes"), b.MaxBytes, "must be greater than 0; omit it for the default"))
		}
	}
	errs = append(errs, config.ValidatePositiveDuration(p.Child("timeout"), c.Timeout)...)

	if t := c.TLS; t != nil {
		tp := p.Child("tls")
		if target != nil && target.Scheme != "https" {
			errs = append(errs, field.Forbidden(tp, fmt.Sprintf(
				"applies only to an https:// URL (the %s is %s://); use https:// to turn TLS on", from, target.Scheme)))
		}
		errs = append(errs, t.Validate(tp)...)
	}

	if a := c.Auth; a != nil {
		ap := p.Child("auth")
		if a.ValueFile == "" {
			errs = append(errs, field.Required(ap.Child("valueFile"),
				"the file that holds the header's value (secrets are never written in the configuration)"))
		}
		if a.Header != "" {
			if why := checkHeaderName(a.Header); why != "" {
				errs = append(errs, field.Invalid(ap.Child("header"), a.Header, why))
			}
		}
		if a.Scheme != "" && !isToken(a.Scheme) {
			errs = append(errs, field.Invalid(ap.Child("scheme"), a.Scheme,
				`must be one word such as "Bearer" or "Basic", without spaces; the value follows it after one space`))
		}
	}

	errs = append(errs, c.validateHeaders(p.Child("headers"))...)
	if v := os.Getenv(EnvCEOverrides); v != "" {
		if _, err := parseOverrides(v); err != nil {
			errs = append(errs, field.Invalid(p, field.OmitValueType{},
				fmt.Sprintf("the %s environment variable %v", EnvCEOverrides, err)))
		}
	}
	return errs
}

// validateHeaders checks the static headers, in the order of their names so
// that the errors come out the same every time.
func (c *Config) validateHeaders(hp *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	seen := map[string]string{}
	authHeader := ""
	if c.Auth != nil {
		authHeader = c.Auth.Header
		if authHeader == "" {
			authHeader = DefaultAuthHeader
		}
	}
	for _, k := range names {
		kp := hp.Key(k)
		if why := checkHeaderName(k); why != "" {
			errs = append(errs, field.Invalid(kp, k, why))
			continue
		}
		canon := strings.ToLower(k)
		if prev, dup := seen[canon]; dup {
			errs = append(errs, field.Invalid(kp, k, fmt.Sprintf("repeats %q: header names are case-insensitive, so a request could carry only one", prev)))
			continue
		}
		seen[canon] = k
		switch {
		case slices.Contains(secretHeaders, canon):
			errs = append(errs, field.Forbidden(kp, fmt.Sprintf(
				"may hold a secret, and secrets are never written in the configuration; use auth: {header: %s, valueFile: ...}", k)))
			continue
		case authHeader != "" && strings.EqualFold(k, authHeader):
			errs = append(errs, field.Forbidden(kp, "is set by auth; remove it from headers"))
			continue
		}
		if why := checkHeaderValue(c.Headers[k]); why != "" {
			errs = append(errs, field.Invalid(kp, field.OmitValueType{}, why))
		}
	}
	return errs
}

// secretHeaders are names that carry credentials by definition; they may
// only come from a file, through auth.
var secretHeaders = []string{"authorization", "proxy-authorization", "cookie"}

// ownedHeaders are set by the binding or by net/http for every request; a
// configured header must not replace them.
var ownedHeaders = []string{
	"content-type", "content-length", "content-encoding", "host", "transfer-encoding",
	"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "expect",
}

// checkHeaderName returns why name cannot be a configured header, or "".
func checkHeaderName(name string) string {
	lower := strings.ToLower(name)
	switch {
	case !isToken(name):
		return "must be an HTTP header name: letters, digits and !#$%&'*+-.^_`|~, without spaces or colons"
	case strings.HasPrefix(lower, encoding.TextHeaderPrefix):
		return "must not start with ce-: those headers carry the event's attributes in binary mode"
	case slices.Contains(ownedHeaders, lower):
		return "is set by kubewire or net/http for every request and cannot be configured"
	}
	return ""
}

// checkHeaderValue returns why v cannot be sent as a header value, or "".
// It never repeats v.
func checkHeaderValue(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return "must not contain control characters such as line breaks"
		}
	}
	return ""
}

// isToken reports whether s is an RFC 9110 token: a header name, or an
// auth scheme.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// parseTarget parses the URL events go to, or says why it cannot be one.
func parseTarget(raw string) (*url.URL, string) {
	u, err := url.Parse(raw)
	if err != nil {
		// The parse error repeats the URL, which may hold a password.
		return nil, `must be a URL such as "https://receiver.ns.svc/events"`
	}
	if u.User != nil {
		return nil, "must not hold credentials; use auth with a valueFile"
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, `must be an http:// or https:// URL such as "https://receiver.ns.svc/events"`
	case u.Host == "" || u.Hostname() == "":
		return nil, "must name a host"
	case u.Fragment != "" || strings.HasSuffix(raw, "#"):
		return nil, "must not have a #fragment, which is never sent"
	}
	return u, ""
}

// ExplicitZeros rejects a 0 written in the file for a field whose zero
// value means "the default".
func (c *Config) ExplicitZeros(p *field.Path, given func(*field.Path) bool) field.ErrorList {
	var errs field.ErrorList
	if b := c.Batch; b != nil {
		if fp := p.Child("batch", "maxEvents"); b.MaxEvents == 0 && given(fp) {
			errs = append(errs, field.Invalid(fp, 0,
				fmt.Sprintf("must be between 1 and %d; omit the field for the default (%d)", MaxBatchMaxEvents, DefaultBatchMaxEvents)))
		}
		if fp := p.Child("batch", "maxBytes"); b.MaxBytes == 0 && given(fp) {
			errs = append(errs, field.Invalid(fp, 0,
				fmt.Sprintf("must be greater than 0; omit the field for the default (%d)", DefaultBatchMaxBytes)))
		}
	}
	return errs
}

// Warnings lists valid but risky settings.
func (c *Config) Warnings(p *field.Path) []string {
	var ws []string
	raw, from := c.effectiveURL()
	if c.URL != "" && os.Getenv(EnvSink) != "" {
		ws = append(ws, fmt.Sprintf("%s is set, so the %s environment variable (%s) is ignored",
			p.Child("url"), EnvSink, displayURL(os.Getenv(EnvSink))))
	}
	if u, why := parseTarget(raw); why == "" && u.Scheme == "http" && c.Auth != nil {
		header := c.Auth.Header
		if header == "" {
			header = DefaultAuthHeader
		}
		ws = append(ws, fmt.Sprintf("%s: the %s header's secret and every event cross the network in clear text (the %s is http://); use https://",
			p.Child("auth"), header, from))
	}
	if c.TLS != nil && c.TLS.InsecureSkipVerify {
		ws = append(ws, fmt.Sprintf("%s: true: the receiver's certificate is not verified, so anyone on the path can read and forge the stream",
			p.Child("tls", "insecureSkipVerify")))
	}
	return ws
}

// Files lists the files the sink reads: the TLS files when it connects,
// the auth file then and whenever it changes.
func (c *Config) Files(p *field.Path) []config.FileRef {
	var refs []config.FileRef
	if t := c.TLS; t != nil {
		refs = t.Files(p.Child("tls"))
	}
	if a := c.Auth; a != nil {
		refs = config.AddFile(refs, p.Child("auth", "valueFile"), a.ValueFile)
	}
	return refs
}

// displayURL is a URL as kubewire prints it: without its query, which may
// carry a key (an Azure Functions ?code=, say), and without credentials.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an invalid URL)"
	}
	d := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	s := d.String()
	if u.RawQuery != "" {
		s += "?…"
	}
	return s
}
