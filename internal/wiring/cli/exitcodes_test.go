package cli_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

// The exit-code table of docs/operations.md, row by row, and where each
// clause is tested:
//
//	0  stopped normally: TestRunExitsWith1AndAnErrorLineWhenShutdownLeftEventsUndelivered
//	   ("a clean drain exits 0").
//	1  a runtime failure: TestValidateAgainstAnAPIServerThatCannotBeReachedExits1NamingIt,
//	   TestTailOfABrokerThatCannotBeReachedExitsNamingTheSink; events left
//	   undelivered: TestRunExitsWith1AndAnErrorLineWhenShutdownLeftEventsUndelivered;
//	   a second signal: TestASecondSignalCutsTheDrainShortAndExits1; a spool held by
//	   another process or another cluster's:
//	   TestRunExitsWith1NamingTheSpoolDirectoryWhenAnotherProcessHoldsItOrItIsAnotherClusters.
//	2  a config file that cannot be read, bad flag values, a kubeconfig that
//	   cannot be loaded, verify's --sink:
//	   TestUsageAndConfigPathErrorsExitWith2AndNameTheCulprit, TestBadFlagsExitWith2,
//	   TestRunRefusesAProfilingAddressThatIsNotHostPortWithExitCode2,
//	   TestNoClusterFoundAtAllAndATailSinkWithNoResourceExit2; tail's
//	   --sink: TestTailsBadFlagsAndSinksExitWith2AndSayWhy; an invalid file:
//	   TestValidateRejectsBadConfigsWithPathValueExpectationAndExitCode2; an
//	   unknown command: TestAnUnknownCommandExits2AndSuggestsTheNearestOne; a
//	   failed check against the cluster:
//	   TestValidateWithAKubeconfigChecksResourcesPermissionsAndFilesAgainstTheCluster;
//	   --strict on a warning: TestValidateWithoutAKubeconfigStaysOfflineAndStrictFailsOnWarnings.
//	3  verify found divergence: TestVerifyExits3WhenTheSinkDivergesAnd0WhenItAgrees.
//	4-8 history cannot answer (no snapshot, gap, compacted, not whole objects, incomplete):
//	   TestHistoryExitsWithItsOwnCodeNamingWhatTheStreamCannotAnswer,
//	   TestHistoryRefusesAnIncompleteSnapshotAndUsesAnOlderCompleteOne.

func TestAnUnknownCommandExits2AndSuggestsTheNearestOne(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention []string
	}{
		{[]string{"bogus"}, []string{`unknown command "bogus"`, "kubewire --help"}},
		{[]string{"valdate"}, []string{`unknown command "valdate"`, "did you mean validate?"}},
	} {
		code, out, errOut := run(tc.args...)
		if code != cli.ExitConfig || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want exit %d and nothing on stdout", tc.args, code, out, cli.ExitConfig)
		}
		for _, m := range tc.mention {
			if !strings.Contains(errOut, m) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, m)
			}
		}
	}
	if code, out, _ := run(); code != cli.ExitOK || !strings.Contains(out, "Available Commands") {
		t.Errorf("no command: exit %d, stdout %q; want the help and exit 0", code, out)
	}
}

// Nothing could be checked, so nothing is known to be wrong with the file:
// a runtime failure, as docs/operations.md says, naming the API server.
func TestValidateAgainstAnAPIServerThatCannotBeReachedExits1NamingIt(t *testing.T) {
	code, out, errOut := run("validate", "--config", write(t, good), "--kubeconfig", write(t, kubeconfig))
	if code != cli.ExitFailed || !strings.Contains(errOut, "checking against the cluster at https://127.0.0.1:1") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d naming the API server", code, out, errOut, cli.ExitFailed)
	}
	if strings.Contains(out, "valid") {
		t.Errorf("validate said the file is valid without the cluster: %q", out)
	}
}

func TestVerifyExits3WhenTheSinkDivergesAnd0WhenItAgrees(t *testing.T) {
	const kafkaSink = "  - name: events\n    type: kafka\n    kafka: {brokers: [\"kafka:9092\"]}\n"
	cfg := write(t, mutate(t, "sinks: [out]", "sinks: [out, events]")+kafkaSink)
	kc := write(t, kubeconfig)
	for _, tc := range []struct {
		name      string
		divergent []string
		code      int
	}{
		{"a divergent key exits 3", []string{"missing configmaps/team-a/web"}, cli.ExitDiverged},
		{"agreement exits 0", nil, cli.ExitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer cli.SetRunVerify(func(context.Context, verify.Options) (*verify.Report, error) {
				return &verify.Report{Sink: "events", Resources: []verify.ResourceReport{{Name: "configmaps", Divergent: tc.divergent}}}, nil
			})()
			if code, out, errOut := run("verify", "--config", cfg, "--sink", "events", "--kubeconfig", kc); code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
		})
	}
}

// TestASecondSignalCutsTheDrainShortAndExits1 runs `kubewire run` in a
// child process (this test binary, see TestMain) whose drain never ends,
// and signals it twice.
func TestASecondSignalCutsTheDrainShortAndExits1(t *testing.T) {
	spooling, _ := withSpoolDir(t, good)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), endlessDrainEnv+"=1", "KUBEWIRE_ARGS=run\n--config\n"+write(t, spooling)+
		"\n--kubeconfig\n"+write(t, kubeconfig)+"\n--http-address\n")
	var errOut testkit.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testkit.Eventually(t, "kubewire to start", func() bool { return strings.Contains(errOut.String(), "kubewire starting") })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	testkit.Eventually(t, "kubewire to drain", func() bool { return strings.Contains(errOut.String(), "draining") })
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitFailed {
			t.Errorf("exit %v, want %d; stderr:\n%s", err, cli.ExitFailed, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after the second signal; stderr:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "second signal") {
		t.Errorf("no line about the second signal:\n%s", errOut.String())
	}
}

// endlessDrainEnv makes this test binary, when set, run cli.Main with the
// newline-separated $KUBEWIRE_ARGS and an app whose drain never ends.
const endlessDrainEnv = "KUBEWIRE_TEST_ENDLESS_DRAIN"

func endlessDrainMain() {
	cli.SetRunApp(func(_ *app.App, ctx context.Context) (int, error) {
		<-ctx.Done()
		select {} // a drain that never ends
	})
	w := bufio.NewWriter(os.Stdout)
	code := cli.Main(strings.Split(os.Getenv("KUBEWIRE_ARGS"), "\n"), w, os.Stderr)
	w.Flush()
	os.Exit(code)
}

func TestNoClusterFoundAtAllAndATailSinkWithNoResourceExit2(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	code, _, errOut := run("run", "--config", write(t, good), "--http-address", "")
	if code != cli.ExitConfig || !strings.Contains(errOut, "set --kubeconfig or $KUBECONFIG") {
		t.Errorf("no cluster: exit %d, stderr %q; want %d and what to set", code, errOut, cli.ExitConfig)
	}

	const kafkaSink = "  - name: events\n    type: kafka\n    kafka: {brokers: [\"kafka:9092\"]}\n"
	code, _, errOut = run("tail", "--config", write(t, good+kafkaSink), "--sink", "events")
	if code != cli.ExitConfig || !strings.Contains(errOut, "no resource is routed") {
		t.Errorf("tail of an unrouted sink: exit %d, stderr %q; want %d", code, errOut, cli.ExitConfig)
	}
}
