package nats_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/nats"
)

// natsBase is a valid configuration with one NATS sink that sets every
// field; the cases below break one thing each.
const natsBase = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    sinks: [bus]
sinks:
  - name: bus
    type: nats
    nats:
      mode: jetstream
      servers: ["nats://nats-0:4222", "tls://nats-1:4222"]
      subject: "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}"
      contentMode: binary
      tls:
        caFile: /etc/nats/ca.pem
        certFile: /etc/nats/tls.crt
        keyFile: /etc/nats/tls.key
        serverName: nats.internal
      auth:
        user: kubewire
        passwordFile: /etc/nats/password
      maxReconnects: -1
      reconnectWait: 2s
      reconnectBufferBytes: 1048576
      connectTimeout: 5s
      publishTimeout: 10s
      jetstream:
        maxPending: 256
        stream:
          name: KUBEWIRE
          subjects: ["kubewire.>"]
          storage: file
          replicas: 3
          maxAge: 24h
          maxBytes: 1073741824
          duplicateWindow: 5m
        kv:
          bucket: KUBEWIRE_OBJECTS
          create: true
          storage: memory
          replicas: 1
`

func natsEdit(pairs ...string) string {
	s := natsBase
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			panic(fmt.Sprintf("natsEdit: %q is not in the base config", pairs[i]))
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func TestTheFullNATSConfigIsValid(t *testing.T) {
	if _, err := config.Parse([]byte(natsBase), app.DefaultRegistry()); err != nil {
		t.Fatalf("base NATS config: %v", err)
	}
}

func TestAMinimalNATSSinkTakesTheDocumentedDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources: [{version: v1, resource: configmaps, sinks: [bus]}]
sinks:
  - name: bus
    type: nats
    nats:
      servers: ["nats://nats:4222"]
      jetstream:
        stream: {name: KW, maxAge: 1m}
        kv: {bucket: KW_OBJECTS, create: true}
`), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Sinks[0].Block.(*nats.Config)
	checks := []struct {
		what      string
		got, want any
	}{
		{"mode", d.Mode, nats.ModeJetStream},
		{"subject", d.Subject, nats.DefaultSubject},
		{"contentMode", d.ContentMode, config.ContentModeBinary},
		{"maxReconnects", *d.MaxReconnects, -1},
		{"reconnectWait", d.ReconnectWait.Duration, 2 * time.Second},
		{"publishTimeout", d.PublishTimeout.Duration, 10 * time.Second},
		{"maxPending", d.JetStream.MaxPending, 256},
		{"stream subjects", d.JetStream.Stream.Subjects, []string{"kubewire.*.*.*.*.*.*"}},
		{"storage", d.JetStream.Stream.Storage, nats.StorageFile},
		{"replicas", d.JetStream.Stream.Replicas, 1},
		// The 2m default window is cut to maxAge, which the server requires.
		{"duplicateWindow", d.JetStream.Stream.DuplicateWindow.Duration, time.Minute},
		{"kv storage", d.JetStream.KV.Storage, nats.StorageFile},
		{"kv replicas", d.JetStream.KV.Replicas, 1},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestBadNATSConfigsAreRejectedWithPathValueAndExpectation(t *testing.T) {
	const p = "sinks[0].nats."
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "A nats sink without its block is told what to add.",
			yaml: natsEdit(natsBase[strings.Index(natsBase, "    nats:\n"):], ""),
			want: []string{"sinks[0].nats: Required value", "servers"},
		},
		{
			name: "A nats block on a stdout sink is forbidden.",
			yaml: natsEdit("    type: nats\n", "    type: stdout\n"),
			want: []string{`sinks[0].nats: Forbidden: may only be set when type is "nats" (type is "stdout")`},
		},
		{
			name: "An unknown mode lists the supported ones.",
			yaml: natsEdit("mode: jetstream", "mode: streaming"),
			want: []string{p + `mode: Unsupported value: "streaming"`, `"jetstream", "core"`},
		},
		{
			name: "An empty server list is required.",
			yaml: natsEdit(`servers: ["nats://nats-0:4222", "tls://nats-1:4222"]`, "servers: []"),
			want: []string{p + "servers: Required value"},
		},
		{
			name: "A server URL with another scheme names the accepted ones.",
			yaml: natsEdit("nats://nats-0:4222", "http://nats-0:4222"),
			want: []string{p + `servers[0]: Invalid value: "http://nats-0:4222": must be a nats:// or tls:// URL`},
		},
		{
			name: "A server URL with a password is refused without echoing the password.",
			yaml: natsEdit("nats://nats-0:4222", "nats://kubewire:hunter2@nats-0:4222"),
			want: []string{p + "servers[0]: Invalid value", "must not hold credentials"},
		},
		{
			name: "A duplicate server is reported.",
			yaml: natsEdit("tls://nats-1:4222", "nats://nats-0:4222"),
			want: []string{p + `servers[1]: Duplicate value: "nats://nats-0:4222"`},
		},
		{
			name: "A subject template with a wildcard is refused.",
			yaml: natsEdit(".{name}\"", ".*\""),
			want: []string{p + "subject: Invalid value", `must not contain the wildcard '*'`},
		},
		{
			name: "A subject template with a full wildcard is refused.",
			yaml: natsEdit(".{name}\"", ".>\""),
			want: []string{p + "subject: Invalid value", `wildcard '>'`},
		},
		{
			name: "A subject template with an empty token is refused.",
			yaml: natsEdit("{resource}.{namespace}", "{resource}..{namespace}"),
			want: []string{p + "subject: Invalid value", "must not have an empty token (token 6)"},
		},
		{
			name: "A subject template with an unknown placeholder lists the known ones.",
			yaml: natsEdit("{name}\"", "{uid}\""),
			want: []string{p + "subject: Invalid value", "unknown placeholder {uid}", "{cluster}, {group}"},
		},
		{
			name: "A subject template with two placeholders in one token is refused.",
			yaml: natsEdit("{namespace}.{name}", "{namespace}-{name}"),
			want: []string{p + "subject: Invalid value", "more than one placeholder"},
		},
		{
			name: "A subject template with an unclosed brace is refused.",
			yaml: natsEdit("{name}\"", "{name\""),
			want: []string{p + "subject: Invalid value", `"{" without a matching "}"`},
		},
		{
			name: "A subject template with a space is refused.",
			yaml: natsEdit("kubewire.{cluster}", "kube wire.{cluster}"),
			want: []string{p + "subject: Invalid value", "printable ASCII without spaces"},
		},
		{
			name: "A subject template in the server's $ namespace is refused.",
			yaml: natsEdit("\"kubewire.{cluster}", "\"$JS.{cluster}"),
			want: []string{p + "subject: Invalid value", `must not start with "$"`},
		},
		{
			name: "A subject template over the length limit says the limit.",
			yaml: natsEdit("\"kubewire.{cluster}", "\""+strings.Repeat("k", 250)+".{cluster}"),
			want: []string{p + "subject: Invalid value", "must be at most 256 characters"},
		},
		{
			name: "An unknown content mode lists the supported ones.",
			yaml: natsEdit("contentMode: binary", "contentMode: batch"),
			want: []string{p + `contentMode: Unsupported value: "batch"`, `"binary", "structured"`},
		},
		{
			name: "A client certificate without its key is refused.",
			yaml: natsEdit("        keyFile: /etc/nats/tls.key\n", ""),
			want: []string{p + "tls: Invalid value", "certFile and keyFile must be set together"},
		},
		{
			name: "A user without a password source is told where passwords come from.",
			yaml: natsEdit("        passwordFile: /etc/nats/password\n", ""),
			want: []string{p + "auth.passwordFile: Required value", "never written in the configuration"},
		},
		{
			name: "A password from both a file and the environment is refused.",
			yaml: natsEdit("        passwordFile: /etc/nats/password\n", "        passwordFile: /etc/nats/password\n        passwordEnv: NATS_PASSWORD\n"),
			want: []string{p + "auth.passwordEnv: Forbidden: set passwordFile or passwordEnv, not both"},
		},
		{
			name: "Two authentication methods are refused.",
			yaml: natsEdit("        user: kubewire\n", "        user: kubewire\n        credsFile: /etc/nats/user.creds\n"),
			want: []string{p + "auth: Forbidden: use one authentication method, not credsFile and user"},
		},
		{
			name: "A token env that looks like a secret, not a variable name, is refused.",
			yaml: natsEdit("        user: kubewire\n        passwordFile: /etc/nats/password\n", "        tokenEnv: \"s3cr3t-t0ken!\"\n"),
			want: []string{p + `auth.tokenEnv: Invalid value: "s3cr3t-t0ken!": must be the name of an environment variable`},
		},
		{
			name: "An inline password field does not exist.",
			yaml: natsEdit("        user: kubewire\n", "        user: kubewire\n        password: hunter2\n"),
			want: []string{p + "auth.password: Forbidden: unknown field"},
		},
		{
			name: "maxReconnects below -1 is refused.",
			yaml: natsEdit("maxReconnects: -1", "maxReconnects: -2"),
			want: []string{p + "maxReconnects: Invalid value: -2: must be -1 (reconnect forever) or at least 0"},
		},
		{
			name: "A zero publishTimeout is refused rather than defaulted.",
			yaml: natsEdit("publishTimeout: 10s", "publishTimeout: 0"),
			want: []string{p + `publishTimeout: Invalid value: "0s": must be greater than 0`},
		},
		{
			name: "A reconnectWait that is not a duration is reported.",
			yaml: natsEdit("reconnectWait: 2s", "reconnectWait: soon"),
			want: []string{p + `reconnectWait: Invalid value: "soon": must be a duration`},
		},
		{
			name: "A jetstream block in core mode is forbidden.",
			yaml: natsEdit("mode: jetstream", "mode: core"),
			want: []string{p + `jetstream: Forbidden: may only be set when mode is "jetstream" (mode is "core")`},
		},
		{
			name: "maxPending out of range says the range.",
			yaml: natsEdit("maxPending: 256", "maxPending: 100000"),
			want: []string{p + "jetstream.maxPending: Invalid value: 100000: must be between 1 and 65536"},
		},
		{
			name: "A stream without a name is told to name it.",
			yaml: natsEdit("          name: KUBEWIRE\n", ""),
			want: []string{p + "jetstream.stream.name: Required value"},
		},
		{
			name: "A stream name with a dot is refused.",
			yaml: natsEdit("name: KUBEWIRE", "name: kube.wire"),
			want: []string{p + `jetstream.stream.name: Invalid value: "kube.wire"`},
		},
		{
			name: "Stream subjects that miss the template's subjects are refused.",
			yaml: natsEdit(`subjects: ["kubewire.>"]`, `subjects: ["other.>"]`),
			want: []string{p + "jetstream.stream.subjects: Invalid value", `must capture every subject the template produces ("kubewire.*.*.*.*.*.*")`},
		},
		{
			name: "A stream subject with a misplaced wildcard is refused.",
			yaml: natsEdit(`subjects: ["kubewire.>"]`, `subjects: ["kubewire.>.x", "kubewire.>"]`),
			want: []string{p + `jetstream.stream.subjects[0]: Invalid value: "kubewire.>.x"`},
		},
		{
			name: "An unknown storage lists the supported ones.",
			yaml: natsEdit("storage: file", "storage: disk"),
			want: []string{p + `jetstream.stream.storage: Unsupported value: "disk"`, `"file", "memory"`},
		},
		{
			name: "Too many replicas says the range.",
			yaml: natsEdit("replicas: 3", "replicas: 7"),
			want: []string{p + "jetstream.stream.replicas: Invalid value: 7: must be between 1 and 5"},
		},
		{
			name: "A negative maxBytes is refused.",
			yaml: natsEdit("maxBytes: 1073741824", "maxBytes: -5"),
			want: []string{p + "jetstream.stream.maxBytes: Invalid value: -5"},
		},
		{
			name: "A duplicate window longer than maxAge is refused with the reason.",
			yaml: natsEdit("duplicateWindow: 5m", "duplicateWindow: 48h"),
			want: []string{p + `jetstream.stream.duplicateWindow: Invalid value: "48h0m0s": must be at most maxAge (24h0m0s)`},
		},
		{
			name: "A key-value block without a bucket asks for one.",
			yaml: natsEdit("          bucket: KUBEWIRE_OBJECTS\n", ""),
			want: []string{p + "jetstream.kv.bucket: Required value"},
		},
		{
			name: "A bucket name the server refuses is refused with what it may hold.",
			yaml: natsEdit("bucket: KUBEWIRE_OBJECTS", "bucket: kube.wire"),
			want: []string{p + `jetstream.kv.bucket: Invalid value: "kube.wire": must be at most 255 letters, digits, "-" and "_"`},
		},
		{
			name: "Bucket storage and replicas without create are forbidden, since nothing would apply them.",
			yaml: natsEdit("          create: true\n", ""),
			want: []string{p + "jetstream.kv.storage: Forbidden: only applies when create is true", p + "jetstream.kv.replicas: Forbidden"},
		},
		{
			name: "An unknown bucket storage lists the supported ones.",
			yaml: natsEdit("storage: memory", "storage: ram"),
			want: []string{p + `jetstream.kv.storage: Unsupported value: "ram"`},
		},
		{
			name: "Too many bucket replicas says the range.",
			yaml: natsEdit("          replicas: 1\n", "          replicas: 9\n"),
			want: []string{p + "jetstream.kv.replicas: Invalid value: 9: must be between 1 and 5"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.yaml), app.DefaultRegistry())
			if err == nil {
				t.Fatalf("Parse succeeded; want an error containing %q", tc.want)
			}
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error is %T, want *config.Error: %v", err, err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error message lacks %q; got:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("the error message repeats a secret:\n%s", msg)
			}
		})
	}
}

func TestNATSPasswordsAndTokensWithoutTLSAreRefusedUnlessAllowInsecureIsSet(t *testing.T) {
	const noTLS = "      tls:\n        caFile: /etc/nats/ca.pem\n        certFile: /etc/nats/tls.crt\n        keyFile: /etc/nats/tls.key\n        serverName: nats.internal\n"
	const plainServers = `servers: ["nats://nats-0:4222", "nats://nats-1:4222"]`
	const mixedServers = `servers: ["nats://nats-0:4222", "tls://nats-1:4222"]`
	const userAuth = "        user: kubewire\n        passwordFile: /etc/nats/password\n"
	cases := []struct {
		name string
		yaml string
		// want lists what the error must say; nil means the config is valid.
		want   []string
		warned bool
	}{
		{
			name: "A user and password over nats:// without a tls block is refused and the error names allowInsecure.",
			yaml: natsEdit(noTLS, "", mixedServers, plainServers),
			want: []string{"sinks[0].nats.tls: Required value", "password", "clear text", "sinks[0].nats.auth.allowInsecure: true"},
		},
		{
			name: "A token over nats:// without a tls block is refused.",
			yaml: natsEdit(noTLS, "", mixedServers, plainServers, userAuth, "        tokenEnv: NATS_TOKEN\n"),
			want: []string{"sinks[0].nats.tls: Required value", "token", "sinks[0].nats.auth.allowInsecure: true"},
		},
		{
			name: "A user and password are accepted when every server URL is tls://.",
			yaml: natsEdit(noTLS, "", mixedServers, `servers: ["tls://nats-0:4222", "tls://nats-1:4222"]`),
		},
		{
			name: "A user and password are accepted when one server URL is tls://, which turns TLS on for every server.",
			yaml: natsEdit(noTLS, ""),
		},
		{
			name: "An nkey seed over nats:// is accepted: the seed never leaves kubewire.",
			yaml: natsEdit(noTLS, "", mixedServers, plainServers, userAuth, "        nkeySeedFile: /etc/nats/user.nk\n"),
		},
		{
			name:   "A user and password over nats:// are accepted with allowInsecure: true, and warned about.",
			yaml:   natsEdit(noTLS, "", mixedServers, plainServers, userAuth, userAuth+"        allowInsecure: true\n"),
			warned: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(c.yaml), app.DefaultRegistry())
			if c.want == nil {
				if err != nil {
					t.Fatalf("the configuration was refused: %v", err)
				}
				warned := strings.Contains(strings.Join(cfg.Warnings(), "\n"), "sinks[0].nats.auth.allowInsecure")
				if warned != c.warned {
					t.Errorf("warned about allowInsecure = %v, want %v; warnings: %q", warned, c.warned, cfg.Warnings())
				}
				return
			}
			testkit.ErrorSays(t, err, c.want...)
		})
	}
}

func TestANATSSubjectWithoutNameIsValidButWarned(t *testing.T) {
	const tmpl = `subject: "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}"`
	cases := []struct {
		name, subject string
		want          []string // what the one warning says; nil means no warning
	}{
		{
			name:    "The default template is not warned about.",
			subject: "",
		},
		{
			name:    "A template with every placeholder is not warned about.",
			subject: tmpl,
		},
		{
			name:    "A template without {name} is warned about with the sink's path and the template.",
			subject: `subject: "kubewire.{cluster}.{resource}.{namespace}"`,
			want:    []string{`sinks[0].nats.subject: "kubewire.{cluster}.{resource}.{namespace}"`, "{name}", "share a subject"},
		},
		{
			name:    "A fixed subject is warned about.",
			subject: `subject: "events"`,
			want:    []string{`sinks[0].nats.subject: "events"`, "{name}"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The base config provisions a stream whose subjects must cover the
			// template; drop it so that any template is valid.
			y := natsEdit(tmpl, c.subject, `          subjects: ["kubewire.>"]`+"\n", "")
			cfg, err := config.Parse([]byte(y), app.DefaultRegistry())
			if err != nil {
				t.Fatalf("the configuration was refused: %v", err)
			}
			ws := cfg.Warnings()
			if c.want == nil {
				if len(ws) != 0 {
					t.Fatalf("warnings = %q, want none", ws)
				}
				return
			}
			if len(ws) != 1 {
				t.Fatalf("warnings = %q, want one", ws)
			}
			for _, w := range c.want {
				if !strings.Contains(ws[0], w) {
					t.Errorf("the warning lacks %q: %s", w, ws[0])
				}
			}
		})
	}
}

// An explicit 0 where 0 is not a usable value used to be replaced by the
// default without a word, unlike the same mistake at the top level.
func TestAnExplicitZeroInANATSBlockIsRejectedRatherThanDefaulted(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "nats reconnectBufferBytes: 0 is rejected with its path.",
			yaml: natsEdit("reconnectBufferBytes: 1048576", "reconnectBufferBytes: 0"),
			want: []string{"sinks[0].nats.reconnectBufferBytes: Invalid value: 0", "-1 (no buffer while reconnecting)"},
		},
		{
			name: "nats jetstream.maxPending: 0 is rejected with its path.",
			yaml: natsEdit("maxPending: 256", "maxPending: 0"),
			want: []string{"sinks[0].nats.jetstream.maxPending: Invalid value: 0", "omit the field for the default (256)"},
		},
		{
			name: "nats jetstream.stream.replicas: 0 is rejected with its path.",
			yaml: natsEdit("replicas: 3", "replicas: 0"),
			want: []string{"sinks[0].nats.jetstream.stream.replicas: Invalid value: 0", "between 1 and 5"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), app.DefaultRegistry())
			testkit.ErrorSays(t, err, c.want...)
		})
	}
}

func TestMeaningfulNATSZerosAreAccepted(t *testing.T) {
	cases := []struct {
		name string
		yaml string
	}{
		{"nats jetstream.stream.maxBytes: 0 means no size limit.", natsEdit("maxBytes: 1073741824", "maxBytes: 0")},
		{"nats maxReconnects: 0 means never reconnect.", natsEdit("maxReconnects: -1", "maxReconnects: 0")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := config.Parse([]byte(c.yaml), app.DefaultRegistry()); err != nil {
				t.Fatalf("the configuration was refused: %v", err)
			}
		})
	}
}
