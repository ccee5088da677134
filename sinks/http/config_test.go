package httpsink_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// httpBase is a valid configuration with one http sink that the cases
// modify. Its block ends with "      url: ...\n" so that cases can append
// fields.
const httpBase = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    sinks: [h]
sinks:
  - name: h
    type: http
    http:
      url: https://receiver.ns.svc/events
`

// noKnativeEnv makes sure the test does not see a K_SINK or
// K_CE_OVERRIDES of the environment it runs in.
func noKnativeEnv(t *testing.T) {
	t.Setenv(httpsink.EnvSink, "")
	t.Setenv(httpsink.EnvCEOverrides, "")
}

func TestTheHTTPBaseConfigIsValidAndDefaulted(t *testing.T) {
	noKnativeEnv(t)
	cfg, err := config.Parse([]byte(httpBase), app.DefaultRegistry())
	if err != nil {
		t.Fatalf("http base config: %v", err)
	}
	d := cfg.Sinks[0].Block.(*httpsink.Config)
	checks := []struct {
		what      string
		got, want any
	}{
		{"url", d.URL, "https://receiver.ns.svc/events"},
		{"contentMode", d.ContentMode, "binary"},
		{"timeout", d.Timeout.Duration, 30 * time.Second},
		{"batch", d.Batch == nil, true},
		{"tls", d.TLS == nil, true},
		{"auth", d.Auth == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("default %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if ws := cfg.Warnings(); len(ws) != 0 {
		t.Errorf("warnings for the base config: %q", ws)
	}
}

func TestTheBatchedModeTakesBatchDefaultsAndExplicitValuesSurvive(t *testing.T) {
	noKnativeEnv(t)
	cfg, err := config.Parse([]byte(httpBase+"      contentMode: batched\n      auth: {valueFile: /var/run/secrets/token}\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Sinks[0].Block.(*httpsink.Config)
	if d.Batch == nil || d.Batch.MaxEvents != 100 || d.Batch.MaxBytes != 512<<10 {
		t.Errorf("batch = %+v, want maxEvents 100 and maxBytes 524288", d.Batch)
	}
	if d.Auth.Header != "Authorization" {
		t.Errorf("auth.header = %q, want Authorization", d.Auth.Header)
	}
	cfg, err = config.Parse([]byte(httpBase+"      contentMode: batched\n      batch: {maxEvents: 10}\n      timeout: 2s\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d = cfg.Sinks[0].Block.(*httpsink.Config)
	if d.Batch.MaxEvents != 10 || d.Batch.MaxBytes != 512<<10 || d.Timeout.Duration != 2*time.Second {
		t.Errorf("batch = %+v, timeout %s; want maxEvents 10, the default maxBytes and 2s", d.Batch, d.Timeout.Duration)
	}
}

func TestBadHTTPConfigsAreRejectedWithPathValueAndExpectation(t *testing.T) {
	withBlock := func(extra string) string { return httpBase + extra }
	withURL := func(u string) string {
		return strings.Replace(httpBase, "url: https://receiver.ns.svc/events", "url: "+u, 1)
	}
	cases := []struct {
		name string
		yaml string
		want []string
		// not must not appear in the error.
		not string
	}{
		{
			name: "A sink without a url and without K_SINK names both.",
			yaml: strings.Replace(httpBase, "    http:\n      url: https://receiver.ns.svc/events\n", "", 1),
			want: []string{"sinks[0].http.url: Required value", "K_SINK"},
		},
		{
			name: "A URL of another scheme is rejected.",
			yaml: withURL("ftp://receiver/events"),
			want: []string{`sinks[0].http.url: Invalid value: "ftp://receiver/events"`, "http:// or https://"},
		},
		{
			name: "A URL without a host is rejected.",
			yaml: withURL("http:///events"),
			want: []string{"sinks[0].http.url", "must name a host"},
		},
		{
			name: "A URL with credentials is rejected without echoing them.",
			yaml: withURL("https://kubewire:s3cret@receiver/events"),
			want: []string{"sinks[0].http.url", "must not hold credentials", "auth"},
			not:  "s3cret",
		},
		{
			name: "A URL with a fragment is rejected.",
			yaml: withURL(`"https://receiver/events#x"`),
			want: []string{"sinks[0].http.url", "fragment"},
		},
		{
			name: "An unknown content mode lists the supported ones.",
			yaml: withBlock("      contentMode: json\n"),
			want: []string{`sinks[0].http.contentMode: Unsupported value: "json"`, `"binary", "structured", "batched"`},
		},
		{
			name: "A batch block outside the batched mode is refused.",
			yaml: withBlock("      batch: {maxEvents: 10}\n"),
			want: []string{"sinks[0].http.batch: Forbidden", `contentMode is "batched" (contentMode is "binary")`},
		},
		{
			name: "Too many events per batch is refused with the range.",
			yaml: withBlock("      contentMode: batched\n      batch: {maxEvents: 20000}\n"),
			want: []string{"sinks[0].http.batch.maxEvents: Invalid value: 20000", "between 1 and 10000"},
		},
		{
			name: "A negative batch size in bytes is refused.",
			yaml: withBlock("      contentMode: batched\n      batch: {maxBytes: -1}\n"),
			want: []string{"sinks[0].http.batch.maxBytes: Invalid value: -1", "greater than 0"},
		},
		{
			name: "An explicit zero batch size is refused rather than defaulted.",
			yaml: withBlock("      contentMode: batched\n      batch: {maxEvents: 0, maxBytes: 0}\n"),
			want: []string{"sinks[0].http.batch.maxEvents: Invalid value: 0", "sinks[0].http.batch.maxBytes: Invalid value: 0", "omit the field"},
		},
		{
			name: "A timeout of zero is refused.",
			yaml: withBlock("      timeout: 0s\n"),
			want: []string{`sinks[0].http.timeout: Invalid value: "0s"`, "greater than 0"},
		},
		{
			name: "A timeout that is not a duration is refused.",
			yaml: withBlock("      timeout: soon\n"),
			want: []string{`sinks[0].http.timeout: Invalid value: "soon"`, "duration"},
		},
		{
			name: "A tls block with an http:// URL is refused.",
			yaml: strings.Replace(withBlock("      tls: {caFile: /etc/ca.crt}\n"), "https://", "http://", 1),
			want: []string{"sinks[0].http.tls: Forbidden", "only to an https:// URL (the url is http://)"},
		},
		{
			name: "A client certificate without its key is refused.",
			yaml: withBlock("      tls: {certFile: /etc/tls.crt}\n"),
			want: []string{`sinks[0].http.tls: Invalid value: "certFile=\"/etc/tls.crt\" keyFile=\"\""`, "set together"},
		},
		{
			name: "insecureSkipVerify with a caFile is a contradiction.",
			yaml: withBlock("      tls: {caFile: /etc/ca.crt, insecureSkipVerify: true}\n"),
			want: []string{"sinks[0].http.tls.insecureSkipVerify: Forbidden", "contradicts caFile and serverName"},
		},
		{
			name: "An auth block without a valueFile is refused.",
			yaml: withBlock("      auth: {header: X-Api-Key}\n"),
			want: []string{"sinks[0].http.auth.valueFile: Required value", "never written in the configuration"},
		},
		{
			name: "An auth value written in the configuration is an unknown field.",
			yaml: withBlock("      auth: {valueFile: /t, value: s3cret}\n"),
			want: []string{"sinks[0].http.auth.value", "unknown field"},
		},
		{
			name: "An auth header that is not a header name is refused.",
			yaml: withBlock("      auth: {header: \"X Api Key\", valueFile: /t}\n"),
			want: []string{`sinks[0].http.auth.header: Invalid value: "X Api Key"`, "HTTP header name"},
		},
		{
			name: "An auth scheme with a space is refused.",
			yaml: withBlock("      auth: {scheme: \"Bearer \", valueFile: /t}\n"),
			want: []string{`sinks[0].http.auth.scheme: Invalid value: "Bearer "`, "one word"},
		},
		{
			name: "A static Authorization header is refused and auth is pointed to.",
			yaml: withBlock("      headers: {Authorization: \"Bearer s3cret\"}\n"),
			want: []string{"sinks[0].http.headers[Authorization]: Forbidden", "use auth"},
			not:  "s3cret",
		},
		{
			name: "A static header may not replace a ce- header.",
			yaml: withBlock("      headers: {ce-source: /elsewhere}\n"),
			want: []string{`sinks[0].http.headers[ce-source]: Invalid value: "ce-source"`, "must not start with ce-"},
		},
		{
			name: "A static header may not replace Content-Type.",
			yaml: withBlock("      headers: {content-type: text/plain}\n"),
			want: []string{`sinks[0].http.headers[content-type]: Invalid value: "content-type"`, "cannot be configured"},
		},
		{
			name: "A static header may not replace the auth header.",
			yaml: withBlock("      auth: {header: X-Api-Key, valueFile: /t}\n      headers: {x-api-key: k}\n"),
			want: []string{"sinks[0].http.headers[x-api-key]: Forbidden", "is set by auth"},
		},
		{
			name: "The same header twice in different case is a duplicate.",
			yaml: withBlock("      headers: {X-Team: a, x-team: b}\n"),
			want: []string{`sinks[0].http.headers[x-team]: Invalid value: "x-team": repeats "X-Team"`, "case-insensitive"},
		},
		{
			name: "A header value with a line break is refused without echoing it.",
			yaml: withBlock("      headers: {X-Team: \"a\\r\\nX-Injected: 1\"}\n"),
			want: []string{"sinks[0].http.headers[X-Team]: Invalid value", "control characters"},
			not:  "X-Injected",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noKnativeEnv(t)
			_, err := config.Parse([]byte(c.yaml), app.DefaultRegistry())
			testkit.ErrorSays(t, err, c.want...)
			if c.not != "" && strings.Contains(err.Error(), c.not) {
				t.Errorf("error repeats %q:\n%v", c.not, err)
			}
		})
	}
}

func TestKSinkStandsInForAMissingURLAndIsCheckedLikeOne(t *testing.T) {
	noBlock := strings.Replace(httpBase, "    http:\n      url: https://receiver.ns.svc/events\n", "", 1)
	t.Run("A valid K_SINK makes the url optional.", func(t *testing.T) {
		noKnativeEnv(t)
		t.Setenv(httpsink.EnvSink, "http://broker-ingress.knative-eventing.svc.cluster.local/default/default")
		if _, err := config.Parse([]byte(noBlock), app.DefaultRegistry()); err != nil {
			t.Fatalf("no url with K_SINK set: %v", err)
		}
	})
	t.Run("An invalid K_SINK is reported at the url.", func(t *testing.T) {
		noKnativeEnv(t)
		t.Setenv(httpsink.EnvSink, "broker:8080")
		_, err := config.Parse([]byte(noBlock), app.DefaultRegistry())
		if err == nil || !strings.Contains(err.Error(), "sinks[0].http.url") || !strings.Contains(err.Error(), "K_SINK environment variable it falls back to must be an http:// or https:// URL") {
			t.Fatalf("invalid K_SINK: %v", err)
		}
	})
	t.Run("A url wins over K_SINK, with a warning.", func(t *testing.T) {
		noKnativeEnv(t)
		t.Setenv(httpsink.EnvSink, "http://broker/?token=s3cret")
		cfg, err := config.Parse([]byte(httpBase), app.DefaultRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ws := fmt.Sprint(cfg.Warnings())
		if !strings.Contains(ws, "sinks[0].http.url is set, so the K_SINK environment variable (http://broker/?…) is ignored") || strings.Contains(ws, "s3cret") {
			t.Errorf("warnings = %s", ws)
		}
	})
	t.Run("A K_CE_OVERRIDES that kubewire cannot honour is refused.", func(t *testing.T) {
		for _, c := range []struct{ env, want string }{
			{`{"extensions": {"partitionkey": "x"}}`, `names "partitionkey", an extension of kubewire's event contract`},
			{`{"extensions": {"source": "x"}}`, `names "source", a CloudEvents attribute`},
			{`{"extensions": {"Team": "x"}}`, "1 to 20 lowercase letters and digits"},
			{`extensions=team`, "must be JSON"},
		} {
			noKnativeEnv(t)
			t.Setenv(httpsink.EnvCEOverrides, c.env)
			_, err := config.Parse([]byte(httpBase), app.DefaultRegistry())
			if err == nil || !strings.Contains(err.Error(), "sinks[0].http: Invalid value") || !strings.Contains(err.Error(), "K_CE_OVERRIDES environment variable") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("K_CE_OVERRIDES=%s: %v; want %q", c.env, err, c.want)
			}
		}
	})
}

func TestRiskyHTTPSettingsAreWarnedAbout(t *testing.T) {
	noKnativeEnv(t)
	cfg, err := config.Parse([]byte(strings.Replace(httpBase, "https://", "http://", 1)+
		"      auth: {header: X-Api-Key, valueFile: /var/run/secrets/key}\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if ws := fmt.Sprint(cfg.Warnings()); !strings.Contains(ws, "sinks[0].http.auth: the X-Api-Key header's secret and every event cross the network in clear text (the url is http://)") {
		t.Errorf("warnings = %s", ws)
	}
	cfg, err = config.Parse([]byte(httpBase+"      tls: {insecureSkipVerify: true}\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if ws := fmt.Sprint(cfg.Warnings()); !strings.Contains(ws, "sinks[0].http.tls.insecureSkipVerify: true") {
		t.Errorf("warnings = %s", ws)
	}
}

func TestTheSinkListsTheFilesItReads(t *testing.T) {
	noKnativeEnv(t)
	cfg, err := config.Parse([]byte(httpBase+
		"      tls: {caFile: /etc/ca.crt, certFile: /etc/tls.crt, keyFile: /etc/tls.key}\n"+
		"      auth: {valueFile: /var/run/secrets/token}\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range cfg.Files() {
		got = append(got, f.Field.String()+"="+f.Path)
	}
	want := []string{
		"sinks[0].http.tls.caFile=/etc/ca.crt", "sinks[0].http.tls.certFile=/etc/tls.crt",
		"sinks[0].http.tls.keyFile=/etc/tls.key", "sinks[0].http.auth.valueFile=/var/run/secrets/token",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Files = %v, want %v", got, want)
	}
}
