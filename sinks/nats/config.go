package nats

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding/template"
	"github.com/kubewire/kubewire/internal/base/config"
)

// NATS modes.
const (
	// ModeCore publishes with core NATS: no acknowledgement from any
	// consumer or store, so delivery is at most once.
	ModeCore = "core"
	// ModeJetStream publishes to a JetStream stream and waits for its
	// PubAck: at least once, with duplicates dropped by the server within
	// the stream's duplicate window.
	ModeJetStream = "jetstream"
)

// JetStream storage types.
const (
	StorageFile   = "file"
	StorageMemory = "memory"
)

// NATS defaults and limits. docs/sinks/nats.md explains them.
const (
	DefaultSubject        = "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
	DefaultMaxReconnects  = -1 // forever: the dispatcher, not the client, decides when to give up
	DefaultReconnectWait  = 2 * time.Second
	DefaultConnectTimeout = 5 * time.Second
	DefaultPublishTimeout = 10 * time.Second
	// DefaultReconnectBufferBytes is what core NATS buffers while it
	// reconnects; beyond it a publish fails with an error rather than
	// growing memory.
	DefaultReconnectBufferBytes = 8 << 20
	DefaultMaxPending           = 256
	MaxMaxPending               = 65536
	DefaultStreamReplicas       = 1
	MaxStreamReplicas           = 5
	DefaultDuplicateWindow      = 2 * time.Minute
	// MaxSubjectTemplateLength bounds the template. Expanded subjects
	// are longer (a Kubernetes name alone may be 253 characters); the bound
	// keeps them well below the server's 4 KiB control line.
	MaxSubjectTemplateLength = 256
)

// SubjectPlaceholders lists the placeholders a subject template may use,
// each written in braces: {cluster}. Every one expands to exactly one
// escaped subject token; docs/sinks/nats.md gives the escaping rules.
func SubjectPlaceholders() []string {
	return []string{"cluster", "group", "version", "resource", "kind", "namespace", "name"}
}

// Config configures a sink of type "nats". Zero values mean the documented
// default; Defaulted returns a copy with them filled in.
type Config struct {
	// Mode is "jetstream" (default; at least once) or "core" (at most once).
	Mode string `json:"mode,omitempty"`
	// Servers lists the server URLs, nats:// or tls://. Required.
	// Credentials do not belong in the URL: use Auth.
	Servers []string `json:"servers"`
	// Subject is the subject template. Default DefaultSubject.
	Subject string `json:"subject,omitempty"`
	// ContentMode is "binary" (default) or "structured".
	ContentMode string `json:"contentMode,omitempty"`
	// TLS configures TLS; setting any field turns TLS on.
	TLS *TLS `json:"tls,omitempty"`
	// Auth configures authentication. At most one method may be used.
	Auth *Auth `json:"auth,omitempty"`
	// MaxReconnects is how many times the client reconnects before it gives
	// up on the connection; -1 (default) means forever. When the client
	// gives up, the next write dials again.
	MaxReconnects *int `json:"maxReconnects,omitempty"`
	// ReconnectWait is the pause between reconnect attempts. Default 2s.
	ReconnectWait config.Duration `json:"reconnectWait"`
	// ReconnectBufferBytes bounds what core NATS buffers while reconnecting.
	// Default 8 MiB. -1 disables the buffer: publishes fail at once while
	// disconnected.
	ReconnectBufferBytes int `json:"reconnectBufferBytes,omitempty"`
	// ConnectTimeout bounds dialling one server. Default 5s.
	ConnectTimeout config.Duration `json:"connectTimeout"`
	// PublishTimeout bounds the wait for a batch's acknowledgements
	// (JetStream) or for the server to confirm the flush (core). Default 10s.
	PublishTimeout config.Duration `json:"publishTimeout"`
	// JetStream tunes the JetStream mode. Forbidden in core mode.
	JetStream *JetStream `json:"jetstream,omitempty"`
}

// TLS configures TLS to the NATS servers.
type TLS struct {
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

// Auth configures authentication. Secrets are only ever read from files
// or environment variables, never written in the configuration, and are never
// logged.
type Auth struct {
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

// JetStream tunes the JetStream mode.
type JetStream struct {
	// MaxPending is the most publishes awaiting their PubAck at once, over
	// every shard of the sink. Default 256.
	MaxPending int `json:"maxPending,omitempty"`
	// Stream, when set, is created or updated to this configuration when the
	// sink connects. Without it the stream must already exist.
	Stream *Stream `json:"stream,omitempty"`
	// KV, when set, also keeps a JetStream key-value bucket up to date: one
	// key per object, holding the object's latest event. It is the NATS
	// counterpart of a compacted Kafka topic.
	KV *KV `json:"kv,omitempty"`
}

// KV is the key-value live view the sink keeps besides its stream.
type KV struct {
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

// Stream is a stream kubewire provisions.
type Stream struct {
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
	MaxAge config.Duration `json:"maxAge"`
	// MaxBytes limits the stream's size; 0 (default) means no limit.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// DuplicateWindow is how long the server remembers a Nats-Msg-Id to drop
	// duplicates. Default 2m. It must cover the longest time a retry can
	// take to repeat an event, and be at most MaxAge when that is set.
	DuplicateWindow config.Duration `json:"duplicateWindow"`
}

// Defaulted returns a copy of n with every unset field at its default. The
// copy shares no slices or pointers with n.
func (n *Config) Defaulted() Config {
	d := *n
	d.Servers = append([]string(nil), n.Servers...)
	d.Mode = cmp.Or(d.Mode, ModeJetStream)
	d.Subject = cmp.Or(d.Subject, DefaultSubject)
	d.ContentMode = cmp.Or(d.ContentMode, config.ContentModeBinary)
	d.TLS = config.Clone(n.TLS)
	d.Auth = config.Clone(n.Auth)
	d.MaxReconnects = config.CopyOr(n.MaxReconnects, DefaultMaxReconnects)
	d.ReconnectWait.Default(DefaultReconnectWait)
	d.ReconnectBufferBytes = cmp.Or(d.ReconnectBufferBytes, DefaultReconnectBufferBytes)
	d.ConnectTimeout.Default(DefaultConnectTimeout)
	d.PublishTimeout.Default(DefaultPublishTimeout)
	if d.Mode == ModeJetStream {
		js := config.CopyOr(n.JetStream, JetStream{})
		js.MaxPending = cmp.Or(js.MaxPending, DefaultMaxPending)
		if js.Stream != nil {
			s := *js.Stream
			if len(s.Subjects) == 0 {
				s.Subjects = []string{StreamSubject(d.Subject)}
			} else {
				s.Subjects = append([]string(nil), s.Subjects...)
			}
			s.Storage = cmp.Or(s.Storage, StorageFile)
			s.Replicas = cmp.Or(s.Replicas, DefaultStreamReplicas)
			if s.DuplicateWindow.Unset() {
				s.DuplicateWindow.Duration = DefaultDuplicateWindow
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
				kv.Storage = StorageFile
			}
			if kv.Create && kv.Replicas == 0 {
				kv.Replicas = DefaultStreamReplicas
			}
			js.KV = &kv
		}
		d.JetStream = js
	}
	return d
}

// StreamSubject is the subject filter that captures every subject the
// template can produce: each token holding a placeholder becomes "*".
func StreamSubject(template string) string {
	toks := strings.Split(template, ".")
	for i, t := range toks {
		if strings.Contains(t, "{") {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// Default fills in every unset field; see Defaulted.
func (n *Config) Default() { *n = n.Defaulted() }

// BlockRequired says what a nats block must hold at least: servers have no
// default.
func (n *Config) BlockRequired() string {
	return `a nats block with at least servers, e.g. {servers: ["nats://nats:4222"]}`
}

// Validate checks the block. Every subject a template expands to is legal
// (see EscapeToken); the one rule on the routed resources is that a
// discover entry's subjects do not hold the version.
func (n *Config) Validate(p *field.Path, routes []config.Route) field.ErrorList {
	errs := validateNATSSink(p, n)
	subject := cmp.Or(n.Subject, DefaultSubject)
	for _, rt := range routes {
		if e := config.NoVersionPlaceholder(p.Child("subject"), subject, rt); e != nil {
			errs = append(errs, e)
			break
		}
	}
	return errs
}

// ExplicitZeros rejects a 0 written in the file for a field whose zero
// value means "the default": defaulting cannot tell the two apart, so an
// explicit 0 would silently become the default. maxReconnects and the
// stream's maxBytes and maxAge are not listed: their 0 is a real value.
func (n *Config) ExplicitZeros(p *field.Path, given func(*field.Path) bool) field.ErrorList {
	var errs field.ErrorList
	zero := func(fp *field.Path, v int64, expect string) {
		if v == 0 && given(fp) {
			errs = append(errs, field.Invalid(fp, 0, expect))
		}
	}
	zero(p.Child("reconnectBufferBytes"), int64(n.ReconnectBufferBytes),
		fmt.Sprintf("must be -1 (no buffer while reconnecting) or greater than 0; omit the field for the default (%d)", DefaultReconnectBufferBytes))
	if js := n.JetStream; js != nil {
		jp := p.Child("jetstream")
		zero(jp.Child("maxPending"), int64(js.MaxPending),
			fmt.Sprintf("must be between 1 and %d; omit the field for the default (%d)", MaxMaxPending, DefaultMaxPending))
		if st := js.Stream; st != nil {
			zero(jp.Child("stream", "replicas"), int64(st.Replicas),
				fmt.Sprintf("must be between 1 and %d; omit the field for the default (%d)", MaxStreamReplicas, DefaultStreamReplicas))
		}
	}
	return errs
}

// Warnings lists valid but risky settings.
func (n *Config) Warnings(p *field.Path) []string {
	var ws []string
	if n.Subject != "" && !strings.Contains(n.Subject, "{name}") {
		ws = append(ws, fmt.Sprintf("%s: %q has no {name}: different objects share a subject, so consumers cannot select one object by subject, and per-subject limits or last-per-subject delivery mix objects",
			p.Child("subject"), n.Subject))
	}
	if n.Auth != nil && n.Auth.AllowInsecure && !n.usesTLS() {
		if secret := natsClearSecret(n.Auth); secret != "" {
			ws = append(ws, fmt.Sprintf("%s: true: the %s and every event cross the network in clear text (no tls block and no tls:// server)", p.Child("auth", "allowInsecure"), secret))
		}
	}
	return ws
}

// Files lists the files the sink reads when it connects.
func (n *Config) Files(p *field.Path) []config.FileRef {
	var refs []config.FileRef
	if t := n.TLS; t != nil {
		refs = config.AddFile(refs, p.Child("tls", "caFile"), t.CAFile)
		refs = config.AddFile(refs, p.Child("tls", "certFile"), t.CertFile)
		refs = config.AddFile(refs, p.Child("tls", "keyFile"), t.KeyFile)
	}
	if a := n.Auth; a != nil {
		refs = config.AddFile(refs, p.Child("auth", "credsFile"), a.CredsFile)
		refs = config.AddFile(refs, p.Child("auth", "nkeySeedFile"), a.NkeySeedFile)
		refs = config.AddFile(refs, p.Child("auth", "passwordFile"), a.PasswordFile)
		refs = config.AddFile(refs, p.Child("auth", "tokenFile"), a.TokenFile)
	}
	return refs
}

// validateNATSSink checks the nats block's own fields.
func validateNATSSink(p *field.Path, n *Config) field.ErrorList {
	var errs field.ErrorList

	mode := n.Mode
	switch mode {
	case "":
		mode = ModeJetStream
	case ModeCore, ModeJetStream:
	default:
		errs = append(errs, field.NotSupported(p.Child("mode"), n.Mode, []string{ModeJetStream, ModeCore}))
	}

	sp := p.Child("servers")
	if len(n.Servers) == 0 {
		errs = append(errs, field.Required(sp, `at least one server URL, e.g. "nats://nats:4222"`))
	}
	for i, s := range n.Servers {
		errs = append(errs, validateNATSServer(sp.Index(i), s, n.Servers[:i])...)
	}

	if n.Subject != "" {
		errs = append(errs, ValidateSubjectTemplate(p.Child("subject"), n.Subject)...)
	}

	switch n.ContentMode {
	case "", config.ContentModeBinary, config.ContentModeStructured:
	default:
		errs = append(errs, field.NotSupported(p.Child("contentMode"), n.ContentMode, []string{config.ContentModeBinary, config.ContentModeStructured}))
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
	errs = append(errs, config.ValidatePositiveDuration(p.Child("reconnectWait"), n.ReconnectWait)...)
	if n.ReconnectBufferBytes < -1 {
		errs = append(errs, field.Invalid(p.Child("reconnectBufferBytes"), n.ReconnectBufferBytes,
			"must be -1 (no buffer while reconnecting) or greater than 0"))
	}
	errs = append(errs, config.ValidatePositiveDuration(p.Child("connectTimeout"), n.ConnectTimeout)...)
	errs = append(errs, config.ValidatePositiveDuration(p.Child("publishTimeout"), n.PublishTimeout)...)

	jp := p.Child("jetstream")
	switch {
	case n.JetStream == nil:
	case mode == ModeCore:
		errs = append(errs, field.Forbidden(jp, `may only be set when mode is "jetstream" (mode is "core")`))
	default:
		errs = append(errs, validateNATSJetStream(jp, n.JetStream, n.Subject)...)
	}
	return errs
}

// usesTLS reports whether the sink connects with TLS: a tls block, or any
// tls:// server URL (the client then uses TLS for every server).
func (n *Config) usesTLS() bool {
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
func natsClearSecret(a *Auth) string {
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

func validateNATSAuth(p *field.Path, a *Auth) field.ErrorList {
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
		if e.v != "" && !config.ValidEnvName(e.v) {
			errs = append(errs, field.Invalid(p.Child(e.name), e.v,
				"must be the name of an environment variable (letters, digits and '_', not starting with a digit), not the secret itself"))
		}
	}
	return errs
}

func validateNATSJetStream(p *field.Path, js *JetStream, template string) field.ErrorList {
	var errs field.ErrorList
	if js.MaxPending != 0 {
		errs = append(errs, config.ValidateRange(p.Child("maxPending"), js.MaxPending, 1, MaxMaxPending)...)
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
		template = DefaultSubject
	}
	produced := StreamSubject(template)
	for i, subj := range s.Subjects {
		if err := validateNATSFilter(subj); err != "" {
			errs = append(errs, field.Invalid(sp.Child("subjects").Index(i), subj, err))
		}
	}
	if len(s.Subjects) > 0 && !anyCovers(s.Subjects, produced) {
		errs = append(errs, field.Invalid(sp.Child("subjects"), s.Subjects,
			fmt.Sprintf("must capture every subject the template produces (%q); otherwise publishes to the others never succeed", produced)))
	}
	errs = append(errs, validateStorage(sp, s.Storage, s.Replicas)...)
	ap := sp.Child("maxAge")
	if bad := config.ValidateDuration(ap, s.MaxAge); bad != nil {
		errs = append(errs, bad)
	} else if s.MaxAge.Duration < 0 {
		errs = append(errs, field.Invalid(ap, s.MaxAge.String(), "must be 0 (no age limit) or greater"))
	}
	if s.MaxBytes < 0 {
		errs = append(errs, field.Invalid(sp.Child("maxBytes"), s.MaxBytes, "must be 0 (no size limit) or greater"))
	}
	dp := sp.Child("duplicateWindow")
	dw := config.ValidatePositiveDuration(dp, s.DuplicateWindow)
	errs = append(errs, dw...)
	if len(dw) == 0 && s.DuplicateWindow.IsSet() && s.MaxAge.Duration > 0 && s.DuplicateWindow.Duration > s.MaxAge.Duration {
		errs = append(errs, field.Invalid(dp, s.DuplicateWindow.String(),
			fmt.Sprintf("must be at most maxAge (%s): the server cannot remember ids longer than it keeps messages", s.MaxAge.String())))
	}
	return errs
}

// natsBucketName is what the server accepts as a key-value bucket name.
var natsBucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func validateNATSKV(p *field.Path, kv *KV) field.ErrorList {
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
	return append(errs, validateStorage(p, kv.Storage, kv.Replicas)...)
}

// validateStorage checks the storage and replicas of a stream or a bucket
// kubewire creates, at p; "" and 0 take the defaults.
func validateStorage(p *field.Path, storage string, replicas int) field.ErrorList {
	var errs field.ErrorList
	switch storage {
	case "", StorageFile, StorageMemory:
	default:
		errs = append(errs, field.NotSupported(p.Child("storage"), storage, []string{StorageFile, StorageMemory}))
	}
	if replicas != 0 {
		errs = append(errs, config.ValidateRange(p.Child("replicas"), replicas, 1, MaxStreamReplicas)...)
	}
	return errs
}

// ValidateSubjectTemplate checks a subject template: tokens separated by
// ".", none empty, no wildcards, no whitespace or control characters, only
// the placeholders of SubjectPlaceholders in braces, at most
// MaxSubjectTemplateLength characters, at most one placeholder per
// token, and not in the reserved "$" namespace of the server.
func ValidateSubjectTemplate(p *field.Path, tmpl string) field.ErrorList {
	invalid := func(why string) field.ErrorList { return field.ErrorList{field.Invalid(p, tmpl, why)} }
	if len(tmpl) > MaxSubjectTemplateLength {
		return invalid(fmt.Sprintf("must be at most %d characters (it has %d)", MaxSubjectTemplateLength, len(tmpl)))
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
// SubjectPlaceholders.
func parseNATSSubjectToken(tok string) error {
	_, err := template.Parse(tok, template.Rules{Placeholders: SubjectPlaceholders(), MaxPlaceholders: 1,
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
