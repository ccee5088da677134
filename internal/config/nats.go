package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding/template"
)

// SinkTypeNATS is the sink type that publishes CloudEvents to NATS, either
// core NATS or JetStream (see NATSSink.Mode).
const SinkTypeNATS = "nats"

// NATS modes.
const (
	// NATSModeCore publishes with core NATS: no acknowledgement from any
	// consumer or store, so delivery is at most once.
	NATSModeCore = "core"
	// NATSModeJetStream publishes to a JetStream stream and waits for its
	// PubAck: at least once, with duplicates dropped by the server within
	// the stream's duplicate window.
	NATSModeJetStream = "jetstream"
)

// CloudEvents content modes.
const (
	// ContentModeBinary puts the attributes in ce- headers and the data in
	// the body.
	ContentModeBinary = "binary"
	// ContentModeStructured puts the whole event, as JSON, in the body.
	ContentModeStructured = "structured"
)

// JetStream storage types.
const (
	NATSStorageFile   = "file"
	NATSStorageMemory = "memory"
)

// NATS defaults and limits. docs/sinks/nats.md explains them.
const (
	DefaultNATSSubject        = "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
	DefaultNATSMaxReconnects  = -1 // forever: the dispatcher, not the client, decides when to give up
	DefaultNATSReconnectWait  = 2 * time.Second
	DefaultNATSConnectTimeout = 5 * time.Second
	DefaultNATSPublishTimeout = 10 * time.Second
	// DefaultNATSReconnectBufferBytes is what core NATS buffers while it
	// reconnects; beyond it a publish fails with an error rather than
	// growing memory.
	DefaultNATSReconnectBufferBytes = 8 << 20
	DefaultNATSMaxPending           = 256
	MaxNATSMaxPending               = 65536
	DefaultNATSStreamReplicas       = 1
	MaxNATSStreamReplicas           = 5
	DefaultNATSDuplicateWindow      = 2 * time.Minute
	// MaxNATSSubjectTemplateLength bounds the template. Expanded subjects
	// are longer (a Kubernetes name alone may be 253 characters); the bound
	// keeps them well below the server's 4 KiB control line.
	MaxNATSSubjectTemplateLength = 256
)

// NATSSubjectPlaceholders lists the placeholders a subject template may use,
// each written in braces: {cluster}. Every one expands to exactly one
// escaped subject token; docs/sinks/nats.md gives the escaping rules.
func NATSSubjectPlaceholders() []string {
	return []string{"cluster", "group", "version", "resource", "kind", "namespace", "name"}
}

// NATSSink configures a sink of type "nats". Zero values mean the documented
// default; Defaulted returns a copy with them filled in.
type NATSSink struct {
	// Mode is "jetstream" (default; at least once) or "core" (at most once).
	Mode string `json:"mode,omitempty"`
	// Servers lists the server URLs, nats:// or tls://. Required.
	// Credentials do not belong in the URL: use Auth.
	Servers []string `json:"servers"`
	// Subject is the subject template. Default DefaultNATSSubject.
	Subject string `json:"subject,omitempty"`
	// ContentMode is "binary" (default) or "structured".
	ContentMode string `json:"contentMode,omitempty"`
	// TLS configures TLS; setting any field turns TLS on.
	TLS *NATSTLS `json:"tls,omitempty"`
	// Auth configures authentication. At most one method may be used.
	Auth *NATSAuth `json:"auth,omitempty"`
	// MaxReconnects is how many times the client reconnects before it gives
	// up on the connection; -1 (default) means forever. When the client
	// gives up, the next write dials again.
	MaxReconnects *int `json:"maxReconnects,omitempty"`
	// ReconnectWait is the pause between reconnect attempts. Default 2s.
	ReconnectWait Duration `json:"reconnectWait"`
	// ReconnectBufferBytes bounds what core NATS buffers while reconnecting.
	// Default 8 MiB. -1 disables the buffer: publishes fail at once while
	// disconnected.
	ReconnectBufferBytes int `json:"reconnectBufferBytes,omitempty"`
	// ConnectTimeout bounds dialling one server. Default 5s.
	ConnectTimeout Duration `json:"connectTimeout"`
	// PublishTimeout bounds the wait for a batch's acknowledgements
	// (JetStream) or for the server to confirm the flush (core). Default 10s.
	PublishTimeout Duration `json:"publishTimeout"`
	// JetStream tunes the JetStream mode. Forbidden in core mode.
	JetStream *NATSJetStream `json:"jetstream,omitempty"`
}

// NATSTLS configures TLS to the NATS servers.
type NATSTLS struct {
	// CAFile holds the PEM certificates that verify the servers. Default:
	// the system roots.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile hold the client certificate and key, for mutual
	// TLS. Both or neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name verified in the server's certificate.
	ServerName string `json:"serverName,omitempty"`
}

// NATSAuth configures authentication. Secrets are only ever read from files
// or environment variables, never written in the configuration, and are never
// logged.
type NATSAuth struct {
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string `json:"credsFile,omitempty"`
	// NkeySeedFile is a file holding a user nkey seed.
	NkeySeedFile string `json:"nkeySeedFile,omitempty"`
	// User is a user name; its password comes from PasswordFile or
	// PasswordEnv (exactly one).
	User         string `json:"user,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	PasswordEnv  string `json:"passwordEnv,omitempty"`
	// TokenFile or TokenEnv holds an authentication token.
	TokenFile string `json:"tokenFile,omitempty"`
	TokenEnv  string `json:"tokenEnv,omitempty"`
	// AllowInsecure accepts a password or token without TLS (no tls block
	// and no tls:// server), which sends the secret in clear text.
	// Validation refuses that unless this is true. Credentials files and
	// nkeys sign a challenge instead, so they need no such flag.
	AllowInsecure bool `json:"allowInsecure,omitempty"`
}

// NATSJetStream tunes the JetStream mode.
type NATSJetStream struct {
	// MaxPending is the most publishes awaiting their PubAck at once, over
	// every shard of the sink. Default 256.
	MaxPending int `json:"maxPending,omitempty"`
	// Stream, when set, is created or updated to this configuration when the
	// sink connects. Without it the stream must already exist.
	Stream *NATSStream `json:"stream,omitempty"`
	// KV, when set, also keeps a JetStream key-value bucket up to date: one
	// key per object, holding the object's latest event. It is the NATS
	// counterpart of a compacted Kafka topic.
	KV *NATSKV `json:"kv,omitempty"`
}

// NATSKV is the key-value live view the sink keeps besides its stream.
type NATSKV struct {
	// Bucket is the bucket's name. Required.
	Bucket string `json:"bucket"`
	// Create creates the bucket on connect, or updates it to this
	// configuration when it exists. Without it the bucket must exist.
	Create bool `json:"create,omitempty"`
	// Storage is "file" (default) or "memory". Only with create.
	Storage string `json:"storage,omitempty"`
	// Replicas is the number of copies, 1 to 5. Default 1. Only with
	// create.
	Replicas int `json:"replicas,omitempty"`
}

// NATSStream is a stream kubewire provisions.
type NATSStream struct {
	// Name of the stream. Required.
	Name string `json:"name"`
	// Subjects the stream captures. Default: the subject template with every
	// token that holds a placeholder replaced by "*".
	Subjects []string `json:"subjects,omitempty"`
	// Storage is "file" (default) or "memory".
	Storage string `json:"storage,omitempty"`
	// Replicas is the number of copies, 1 to 5. Default 1.
	Replicas int `json:"replicas,omitempty"`
	// MaxAge limits how long messages are kept; 0 (default) keeps them until
	// another limit applies.
	MaxAge Duration `json:"maxAge"`
	// MaxBytes limits the stream's size; 0 (default) means no limit.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// DuplicateWindow is how long the server remembers a Nats-Msg-Id to drop
	// duplicates. Default 2m. It must cover the longest time a retry can
	// take to repeat an event, and be at most MaxAge when that is set.
	DuplicateWindow Duration `json:"duplicateWindow"`
}

// Defaulted returns a copy of n with every unset field at its default. The
// copy shares no slices or pointers with n.
func (n *NATSSink) Defaulted() NATSSink {
	d := *n
	d.Servers = append([]string(nil), n.Servers...)
	if d.Mode == "" {
		d.Mode = NATSModeJetStream
	}
	if d.Subject == "" {
		d.Subject = DefaultNATSSubject
	}
	if d.ContentMode == "" {
		d.ContentMode = ContentModeBinary
	}
	if n.TLS != nil {
		t := *n.TLS
		d.TLS = &t
	}
	if n.Auth != nil {
		a := *n.Auth
		d.Auth = &a
	}
	mr := DefaultNATSMaxReconnects
	if n.MaxReconnects != nil {
		mr = *n.MaxReconnects
	}
	d.MaxReconnects = &mr
	if d.ReconnectWait.unset() {
		d.ReconnectWait.Duration = DefaultNATSReconnectWait
	}
	if d.ReconnectBufferBytes == 0 {
		d.ReconnectBufferBytes = DefaultNATSReconnectBufferBytes
	}
	if d.ConnectTimeout.unset() {
		d.ConnectTimeout.Duration = DefaultNATSConnectTimeout
	}
	if d.PublishTimeout.unset() {
		d.PublishTimeout.Duration = DefaultNATSPublishTimeout
	}
	if d.Mode == NATSModeJetStream {
		js := NATSJetStream{}
		if n.JetStream != nil {
			js = *n.JetStream
		}
		if js.MaxPending == 0 {
			js.MaxPending = DefaultNATSMaxPending
		}
		if js.Stream != nil {
			s := *js.Stream
			if len(s.Subjects) == 0 {
				s.Subjects = []string{NATSStreamSubject(d.Subject)}
			} else {
				s.Subjects = append([]string(nil), s.Subjects...)
			}
			if s.Storage == "" {
				s.Storage = NATSStorageFile
			}
			if s.Replicas == 0 {
				s.Replicas = DefaultNATSStreamReplicas
			}
			if s.DuplicateWindow.unset() {
				s.DuplicateWindow.Duration = DefaultNATSDuplicateWindow
				// The server refuses a window longer than maxAge.
				if s.MaxAge.Duration > 0 && s.MaxAge.Duration < s.DuplicateWindow.Duration {
					s.DuplicateWindow.Duration = s.MaxAge.Duration
				}
			}
			js.Stream = &s
		}
		if js.KV != nil {
			kv := *js.KV
			if kv.Create && kv.Storage == "" {
				kv.Storage = NATSStorageFile
			}
			if kv.Create && kv.Replicas == 0 {
				kv.Replicas = DefaultNATSStreamReplicas
			}
			js.KV = &kv
		}
		d.JetStream = &js
	}
	return d
}

// NATSStreamSubject is the subject filter that captures every subject the
// template can produce: each token holding a placeholder becomes "*".
func NATSStreamSubject(template string) string {
	toks := strings.Split(template, ".")
	for i, t := range toks {
		if strings.Contains(t, "{") {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// envName is what a portable environment variable name looks like.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateNATSSink checks the nats block of a sink of type "nats". n may be
// nil (the block was omitted), which is an error because servers is
// required.
func validateNATSSink(p *field.Path, n *NATSSink) field.ErrorList {
	if n == nil {
		return field.ErrorList{field.Required(p, `a nats block with at least servers, e.g. {servers: ["nats://nats:4222"]}`)}
	}
	var errs field.ErrorList

	mode := n.Mode
	switch mode {
	case "":
		mode = NATSModeJetStream
	case NATSModeCore, NATSModeJetStream:
	default:
		errs = append(errs, field.NotSupported(p.Child("mode"), n.Mode, []string{NATSModeJetStream, NATSModeCore}))
	}

	sp := p.Child("servers")
	if len(n.Servers) == 0 {
		errs = append(errs, field.Required(sp, `at least one server URL, e.g. "nats://nats:4222"`))
	}
	for i, s := range n.Servers {
		errs = append(errs, validateNATSServer(sp.Index(i), s, n.Servers[:i])...)
	}

	if n.Subject != "" {
		errs = append(errs, ValidateNATSSubjectTemplate(p.Child("subject"), n.Subject)...)
	}

	switch n.ContentMode {
	case "", ContentModeBinary, ContentModeStructured:
	default:
		errs = append(errs, field.NotSupported(p.Child("contentMode"), n.ContentMode, []string{ContentModeBinary, ContentModeStructured}))
	}

	if t := n.TLS; t != nil {
		tp := p.Child("tls")
		if (t.CertFile == "") != (t.KeyFile == "") {
			errs = append(errs, field.Invalid(tp, fmt.Sprintf("certFile=%q keyFile=%q", t.CertFile, t.KeyFile),
				"certFile and keyFile must be set together (client certificate and its key) or not at all"))
		}
	}

	if a := n.Auth; a != nil {
		errs = append(errs, validateNATSAuth(p.Child("auth"), a)...)
		if secret := natsClearSecret(a); secret != "" && !n.usesTLS() && !a.AllowInsecure {
			errs = append(errs, field.Required(p.Child("tls"), fmt.Sprintf(
				"auth sends the %s in clear text without TLS; add a tls block (tls: {} uses the system roots) or use tls:// server URLs, or set %s: true to accept that",
				secret, p.Child("auth", "allowInsecure"))))
		}
	}

	if mr := n.MaxReconnects; mr != nil && *mr < -1 {
		errs = append(errs, field.Invalid(p.Child("maxReconnects"), *mr, "must be -1 (reconnect forever) or at least 0"))
	}
	errs = append(errs, validatePositiveDuration(p.Child("reconnectWait"), n.ReconnectWait)...)
	if n.ReconnectBufferBytes < -1 {
		errs = append(errs, field.Invalid(p.Child("reconnectBufferBytes"), n.ReconnectBufferBytes,
			"must be -1 (no buffer while reconnecting) or greater than 0"))
	}
	errs = append(errs, validatePositiveDuration(p.Child("connectTimeout"), n.ConnectTimeout)...)
	errs = append(errs, validatePositiveDuration(p.Child("publishTimeout"), n.PublishTimeout)...)

	jp := p.Child("jetstream")
	switch {
	case n.JetStream == nil:
	case mode == NATSModeCore:
		errs = append(errs, field.Forbidden(jp, `may only be set when mode is "jetstream" (mode is "core")`))
	default:
		errs = append(errs, validateNATSJetStream(jp, n.JetStream, n.Subject)...)
	}
	return errs
}

// usesTLS reports whether the sink connects with TLS: a tls block, or any
// tls:// server URL (the client then uses TLS for every server).
func (n *NATSSink) usesTLS() bool {
	if n.TLS != nil {
		return true
	}
	for _, s := range n.Servers {
		if strings.HasPrefix(s, "tls://") {
			return true
		}
	}
	return false
}

// natsClearSecret names the secret that auth a sends to the server as is
// ("password" or "token"), or returns "" when it sends none.
func natsClearSecret(a *NATSAuth) string {
	switch {
	case a.User != "" || a.PasswordFile != "" || a.PasswordEnv != "":
		return "password"
	case a.TokenFile != "" || a.TokenEnv != "":
		return "token"
	}
	return ""
}

func validateNATSServer(p *field.Path, s string, earlier []string) field.ErrorList {
	if s == "" {
		return field.ErrorList{field.Required(p, `a server URL such as "nats://nats:4222"`)}
	}
	for _, e := range earlier {
		if e == s {
			return field.ErrorList{field.Duplicate(p, s)}
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		// The parse error repeats the URL, which may hold a password.
		return field.ErrorList{field.Invalid(p, field.OmitValueType{}, `must be a URL such as "nats://nats:4222"`)}
	}
	if u.User != nil {
		// Never echo the value: it holds a credential.
		return field.ErrorList{field.Invalid(p, field.OmitValueType{},
			"must not hold credentials; use auth with a file or an environment variable")}
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return field.ErrorList{field.Invalid(p, s, `must be a nats:// or tls:// URL such as "nats://nats:4222"`)}
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return field.ErrorList{field.Invalid(p, s, `must be scheme://host[:port] with no path or query, such as "nats://nats:4222"`)}
	}
	return nil
}

func validateNATSAuth(p *field.Path, a *NATSAuth) field.ErrorList {
	var errs field.ErrorList
	var methods []string
	if a.CredsFile != "" {
		methods = append(methods, "credsFile")
	}
	if a.NkeySeedFile != "" {
		methods = append(methods, "nkeySeedFile")
	}
	if a.User != "" || a.PasswordFile != "" || a.PasswordEnv != "" {
		methods = append(methods, "user")
		switch {
		case a.User == "":
			errs = append(errs, field.Required(p.Child("user"), "the user name that passwordFile or passwordEnv belongs to"))
		case a.PasswordFile == "" && a.PasswordEnv == "":
			errs = append(errs, field.Required(p.Child("passwordFile"),
				"user needs a password from passwordFile or passwordEnv (passwords are never written in the configuration)"))
		case a.PasswordFile != "" && a.PasswordEnv != "":
			errs = append(errs, field.Forbidden(p.Child("passwordEnv"), "set passwordFile or passwordEnv, not both"))
		}
	}
	if a.TokenFile != "" || a.TokenEnv != "" {
		methods = append(methods, "token")
		if a.TokenFile != "" && a.TokenEnv != "" {
			errs = append(errs, field.Forbidden(p.Child("tokenEnv"), "set tokenFile or tokenEnv, not both"))
		}
	}
	if len(methods) > 1 {
		errs = append(errs, field.Forbidden(p, "use one authentication method, not "+strings.Join(methods, " and ")))
	}
	for _, e := range []struct{ name, v string }{{"passwordEnv", a.PasswordEnv}, {"tokenEnv", a.TokenEnv}} {
		if e.v != "" && !envName.MatchString(e.v) {
			errs = append(errs, field.Invalid(p.Child(e.name), e.v,
				"must be the name of an environment variable (letters, digits and '_', not starting with a digit), not the secret itself"))
		}
	}
	return errs
}

func validateNATSJetStream(p *field.Path, js *NATSJetStream, template string) field.ErrorList {
	var errs field.ErrorList
	if js.MaxPending != 0 {
		errs = append(errs, validateRange(p.Child("maxPending"), js.MaxPending, 1, MaxNATSMaxPending)...)
	}
	if js.KV != nil {
		errs = append(errs, validateNATSKV(p.Child("kv"), js.KV)...)
	}
	s := js.Stream
	if s == nil {
		return errs
	}
	sp := p.Child("stream")
	switch {
	case s.Name == "":
		errs = append(errs, field.Required(sp.Child("name"), "the name of the stream to create or update"))
	case strings.ContainsAny(s.Name, " \t\r\n.*>/\\") || len(s.Name) > 255:
		errs = append(errs, field.Invalid(sp.Child("name"), s.Name,
			`must be at most 255 characters without whitespace, ".", "*", ">", "/" or "\"`))
	}
	if template == "" {
		template = DefaultNATSSubject
	}
	produced := NATSStreamSubject(template)
	for i, subj := range s.Subjects {
		if err := validateNATSFilter(subj); err != "" {
			errs = append(errs, field.Invalid(sp.Child("subjects").Index(i), subj, err))
		}
	}
	if len(s.Subjects) > 0 && !anyCovers(s.Subjects, produced) {
		errs = append(errs, field.Invalid(sp.Child("subjects"), s.Subjects,
			fmt.Sprintf("must capture every subject the template produces (%q); otherwise publishes to the others never succeed", produced)))
	}
	switch s.Storage {
	case "", NATSStorageFile, NATSStorageMemory:
	default:
		errs = append(errs, field.NotSupported(sp.Child("storage"), s.Storage, []string{NATSStorageFile, NATSStorageMemory}))
	}
	if s.Replicas != 0 {
		errs = append(errs, validateRange(sp.Child("replicas"), s.Replicas, 1, MaxNATSStreamReplicas)...)
	}
	ap := sp.Child("maxAge")
	if bad := validateDurationSyntax(ap, s.MaxAge); bad != nil {
		errs = append(errs, bad)
	} else if s.MaxAge.Duration < 0 {
		errs = append(errs, field.Invalid(ap, s.MaxAge.String(), "must be 0 (no age limit) or greater"))
	}
	if s.MaxBytes < 0 {
		errs = append(errs, field.Invalid(sp.Child("maxBytes"), s.MaxBytes, "must be 0 (no size limit) or greater"))
	}
	dp := sp.Child("duplicateWindow")
	dw := validatePositiveDuration(dp, s.DuplicateWindow)
	errs = append(errs, dw...)
	if len(dw) == 0 && s.DuplicateWindow.set && s.MaxAge.Duration > 0 && s.DuplicateWindow.Duration > s.MaxAge.Duration {
		errs = append(errs, field.Invalid(dp, s.DuplicateWindow.String(),
			fmt.Sprintf("must be at most maxAge (%s): the server cannot remember ids longer than it keeps messages", s.MaxAge.String())))
	}
	return errs
}

// natsBucketName is what the server accepts as a key-value bucket name.
var natsBucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func validateNATSKV(p *field.Path, kv *NATSKV) field.ErrorList {
	var errs field.ErrorList
	switch {
	case kv.Bucket == "":
		errs = append(errs, field.Required(p.Child("bucket"), "the name of the key-value bucket to keep up to date"))
	case !natsBucketName.MatchString(kv.Bucket) || len(kv.Bucket) > 255:
		errs = append(errs, field.Invalid(p.Child("bucket"), kv.Bucket,
			`must be at most 255 letters, digits, "-" and "_"`))
	}
	if !kv.Create {
		for _, f := range []struct {
			name string
			set  bool
		}{{"storage", kv.Storage != ""}, {"replicas", kv.Replicas != 0}} {
			if f.set {
				errs = append(errs, field.Forbidden(p.Child(f.name),
					"only applies when create is true; without it kubewire uses the bucket as it exists"))
			}
		}
		return errs
	}
	switch kv.Storage {
	case "", NATSStorageFile, NATSStorageMemory:
	default:
		errs = append(errs, field.NotSupported(p.Child("storage"), kv.Storage, []string{NATSStorageFile, NATSStorageMemory}))
	}
	if kv.Replicas != 0 {
		errs = append(errs, validateRange(p.Child("replicas"), kv.Replicas, 1, MaxNATSStreamReplicas)...)
	}
	return errs
}

// validatePositiveDuration accepts an unset duration (it takes a default)
// and any duration greater than zero.
func validatePositiveDuration(p *field.Path, d Duration) field.ErrorList {
	if bad := validateDurationSyntax(p, d); bad != nil {
		return field.ErrorList{bad}
	}
	if d.set && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.String(), "must be greater than 0; omit the field for the default")}
	}
	return nil
}

// ValidateNATSSubjectTemplate checks a subject template: tokens separated by
// ".", none empty, no wildcards, no whitespace or control characters, only
// the placeholders of NATSSubjectPlaceholders in braces, at most
// MaxNATSSubjectTemplateLength characters, at most one placeholder per
// token, and not in the reserved "$" namespace of the server.
func ValidateNATSSubjectTemplate(p *field.Path, tmpl string) field.ErrorList {
	invalid := func(why string) field.ErrorList { return field.ErrorList{field.Invalid(p, tmpl, why)} }
	if len(tmpl) > MaxNATSSubjectTemplateLength {
		return invalid(fmt.Sprintf("must be at most %d characters (it has %d)", MaxNATSSubjectTemplateLength, len(tmpl)))
	}
	if strings.HasPrefix(tmpl, "$") {
		return invalid(`must not start with "$": subjects beginning with "$" are reserved for the server ($JS, $SYS)`)
	}
	for i, tok := range strings.Split(tmpl, ".") {
		if tok == "" {
			return invalid(fmt.Sprintf(`must not have an empty token (token %d): no leading, trailing or doubled "."`, i+1))
		}
		if err := parseNATSSubjectToken(tok); err != nil {
			if te := (*template.Error)(nil); errors.As(err, &te) && te.TooMany {
				// "{namespace}{name}" would let "ab"+"c" and "a"+"bc" meet.
				return invalid(fmt.Sprintf("token %d holds more than one placeholder; give each placeholder its own token so that different objects never share a subject", i+1))
			}
			return invalid(err.Error())
		}
	}
	return nil
}

// parseNATSSubjectToken parses one token of a subject template: printable
// ASCII without wildcards, and at most one placeholder of
// NATSSubjectPlaceholders.
func parseNATSSubjectToken(tok string) error {
	_, err := template.Parse(tok, template.Rules{Placeholders: NATSSubjectPlaceholders(), MaxPlaceholders: 1,
		Literal: func(r rune) string {
			switch {
			case r == '*' || r == '>':
				return fmt.Sprintf("must not contain the wildcard %q: every event needs one concrete subject", r)
			case r <= ' ' || r == 0x7f || r > 0x7e:
				return fmt.Sprintf("must hold only printable ASCII without spaces outside placeholders (found %q)", r)
			}
			return ""
		}})
	return err
}

// validateNATSFilter checks a stream subject filter; it returns why it is
// invalid, or "".
func validateNATSFilter(s string) string {
	if s == "" {
		return `must be a subject such as "kubewire.>"`
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return `must not have an empty token: no leading, trailing or doubled "."`
		case t == ">" && i != len(toks)-1:
			return `may use ">" only as the last token`
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return `may use "*" and ">" only as whole tokens`
		case strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			return "must not contain whitespace or control characters"
		}
	}
	return ""
}

// anyCovers reports whether one of filters matches every subject that the
// filter want matches.
func anyCovers(filters []string, want string) bool {
	w := strings.Split(want, ".")
next:
	for _, f := range filters {
		ft := strings.Split(f, ".")
		for i, t := range ft {
			if t == ">" {
				if len(w) > i {
					return true
				}
				continue next
			}
			if i >= len(w) || (t != "*" && t != w[i]) {
				continue next
			}
		}
		if len(ft) == len(w) {
			return true
		}
	}
	return false
}
