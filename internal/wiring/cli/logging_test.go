package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// secretKubeconfig has two contexts whose credentials must never reach a
// log line: a bearer token, and a password in the server URL's user info
// (plus a token in its query).
const secretKubeconfig = `apiVersion: v1
kind: Config
clusters:
- {name: plain, cluster: {server: "https://127.0.0.1:1"}}
- {name: userinfo, cluster: {server: "https://kwuser:urlpassword-s3cr3t@127.0.0.1:2/prefix?access_token=querytoken-s3cr3t"}}
users:
- {name: token, user: {token: bearertoken-s3cr3t}}
- {name: basic, user: {username: kwuser, password: basicpassword-s3cr3t}}
contexts:
- {name: with-token, context: {cluster: plain, user: token}}
- {name: with-userinfo, context: {cluster: userinfo, user: basic}}
current-context: with-token
`

func TestRunsStartupLineNamesTheAPIServerContextClusterAndSinksButNoCredential(t *testing.T) {
	base := mutate(t, "sinks: [out]", "sinks: [out, events]") +
		"  - name: events\n    type: nats\n    nats: {servers: [\"nats://127.0.0.1:4222\"], mode: core}\n"
	kc := write(t, secretKubeconfig)
	cases := []struct {
		name    string
		args    []string
		mention map[string]any // JSON fields of the startup line
	}{
		{"the current context with a bearer token", nil,
			map[string]any{"apiserver": "https://127.0.0.1:1", "context": "with-token"}},
		{"a context whose server URL holds a password and a token", []string{"--context", "with-userinfo"},
			map[string]any{"apiserver": "https://127.0.0.1:2", "context": "with-userinfo"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The app is never closed, so its spools stay locked: each
			// run needs a spool directory of its own.
			spooling, _ := withSpoolDir(t, base)
			cfg := write(t, spooling)
			defer cli.SetRunApp(func(*app.App, context.Context) (int, error) { return 0, nil })()
			args := append([]string{"run", "--config", cfg, "--kubeconfig", kc, "--http-address", "", "--log-format", "json"}, tc.args...)
			code, _, errOut := run(args...)
			if code != cli.ExitOK {
				t.Fatalf("exit %d; stderr:\n%s", code, errOut)
			}
			if strings.Contains(errOut, "s3cr3t") {
				t.Errorf("a credential reached the log:\n%s", errOut)
			}
			var line map[string]any
			for _, l := range strings.Split(errOut, "\n") {
				if strings.Contains(l, "kubewire starting") {
					if err := json.Unmarshal([]byte(l), &line); err != nil {
						t.Fatal(err)
					}
				}
			}
			if line == nil {
				t.Fatalf("no startup line:\n%s", errOut)
			}
			want := map[string]any{"cluster": "demo", "resources": 1.0, "sinks": []any{"out(stdout)", "events(nats)"}}
			for k, v := range tc.mention {
				want[k] = v
			}
			for k, v := range want {
				if got, _ := json.Marshal(line[k]); string(got) != mustJSON(t, v) {
					t.Errorf("%s = %s, want %s", k, got, mustJSON(t, v))
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
