package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// withSpoolDir makes a config spool into a directory of the test's own, so
// that runs never share (and lock) the default one.
func withSpoolDir(t *testing.T, cfg string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	return cfg + "dispatch:\n  spoolDir: " + dir + "\n", dir
}

// useSpool opens the spool in dir as owner's sink would.
func useSpool(t *testing.T, owner spool.Owner, dir string) *dispatch.Dispatcher {
	t.Helper()
	d := dispatch.NewDispatcher(owner.Sink, &memsink.Sink{}, dispatch.Options{})
	if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval, Owner: owner}); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRunExitsWith1NamingTheSpoolDirectoryWhenAnotherProcessHoldsItOrItIsAnotherClusters(t *testing.T) {
	cases := []struct {
		name string
		// prepare leaves the sink's spool directory as the case needs it.
		prepare func(t *testing.T, sinkDir string)
		mention []string
	}{
		{"held by another process", func(t *testing.T, sinkDir string) {
			d := useSpool(t, spool.Owner{Cluster: "demo", Sink: "out", Type: "stdout"}, sinkDir)
			t.Cleanup(func() { d.Close(context.Background()) })
		}, []string{"another kubewire process", "pid " + strconv.Itoa(os.Getpid()), "dispatch.spoolDir"}},
		{"written for another cluster", func(t *testing.T, sinkDir string) {
			useSpool(t, spool.Owner{Cluster: "staging", Sink: "out", Type: "stdout"}, sinkDir).Close(context.Background())
		}, []string{`cluster "staging"`, `cluster "demo"`, "move the directory aside", "dispatch.spoolDir"}},
	}
	kc := write(t, kubeconfig)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, spoolDir := withSpoolDir(t, good)
			sinkDir := filepath.Join(spoolDir, "out")
			tc.prepare(t, sinkDir)
			ran := false
			defer cli.SetRunApp(func(*app.App, context.Context) (int, error) { ran = true; return 0, nil })()

			code, _, errOut := run("run", "--config", write(t, cfg), "--kubeconfig", kc, "--http-address", "")
			if code != cli.ExitFailed {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, cli.ExitFailed, errOut)
			}
			if ran {
				t.Fatal("kubewire started streaming without its spool")
			}
			for _, m := range append(tc.mention, `error: sink "out"`, sinkDir) {
				if !strings.Contains(errOut, m) {
					t.Errorf("stderr does not mention %q:\n%s", m, errOut)
				}
			}
		})
	}
}
