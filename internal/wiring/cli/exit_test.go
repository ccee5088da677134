package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// kubeconfig points at a port nothing listens on: `run` builds its clients
// without connecting, and these tests never let the app start.
const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

func TestRunExitsWith1AndAnErrorLineWhenShutdownLeftEventsUndelivered(t *testing.T) {
	cases := []struct {
		name        string
		undelivered int
		err         error
		code        int
		mention     []string
	}{
		{"a clean drain exits 0", 0, nil, cli.ExitOK, nil},
		{"events the sinks did not deliver exit 1", 3, nil, cli.ExitFailed,
			[]string{"level=ERROR", "undelivered=3", "not delivered before the drain deadline"}},
		{"notifications an informer did not drain exit 1", 0, fmt.Errorf("configmaps: %w", informer.ErrNotDrained), cli.ExitFailed,
			[]string{"level=ERROR", "configmaps", "drain deadline"}},
	}
	kc := write(t, kubeconfig)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The app is never closed, so its spool stays locked: each
			// run needs a spool directory of its own.
			spooling, _ := withSpoolDir(t, good)
			cfg := write(t, spooling)
			defer cli.SetRunApp(func(*app.App, context.Context) (int, error) { return tc.undelivered, tc.err })()
			code, _, errOut := run("run", "--config", cfg, "--kubeconfig", kc, "--http-address", "")
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			for _, m := range tc.mention {
				if !strings.Contains(errOut, m) {
					t.Errorf("stderr does not mention %q:\n%s", m, errOut)
				}
			}
			if tc.code == cli.ExitOK && strings.Contains(errOut, "level=ERROR") {
				t.Errorf("a clean stop logged an error:\n%s", errOut)
			}
		})
	}
}
