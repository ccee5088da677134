package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

const good = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    labelSelector: app=web
    snapshotInterval: 30m
    sinks: [out]
sinks:
  - name: out
    type: stdout
`

func mutate(t *testing.T, from, to string) string {
	t.Helper()
	if !strings.Contains(good, from) {
		t.Fatalf("%q is not in the good config", from)
	}
	return strings.Replace(good, from, to, 1)
}

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubewire.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = cli.Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestValidateAcceptsAGoodConfigAndTheEmbeddedExample(t *testing.T) {
	for name, content := range map[string]string{"good": good, "example": string(config.ExampleYAML)} {
		code, out, errOut := run("validate", "--config", write(t, content))
		if code != cli.ExitOK || !strings.Contains(out, "valid") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
	}
}

func TestValidateRejectsBadConfigsWithPathValueExpectationAndExitCode2(t *testing.T) {
	cases := []struct {
		name    string
		config  func(t *testing.T) string
		mention []string
	}{
		{"an unknown top-level field is named", func(t *testing.T) string { return good + "colour: blue\n" },
			[]string{"colour", "unknown field"}},
		{"an unknown field inside a resource is named with its index", func(t *testing.T) string {
			return mutate(t, "    resource: configmaps\n", "    resource: configmaps\n    namespace: x\n")
		}, []string{"resources[0].namespace", "unknown field"}},
		{"a bad label selector names the selector", func(t *testing.T) string { return mutate(t, "app=web", "app==web=") },
			[]string{"resources[0].labelSelector", "app==web="}},
		{"a bad field selector names the selector", func(t *testing.T) string {
			return mutate(t, "    labelSelector: app=web\n", "    fieldSelector: metadata.name\n")
		}, []string{"resources[0].fieldSelector", "metadata.name"}},
		{"an unknown sink reference lists the sinks that exist", func(t *testing.T) string { return mutate(t, "sinks: [out]", "sinks: [kafka]") },
			[]string{"resources[0].sinks[0]", "kafka", "out"}},
		{"duplicate sink names are reported", func(t *testing.T) string {
			return good + "  - name: out\n    type: stdout\n"
		}, []string{"sinks[1].name", "Duplicate", "out"}},
		{"a duplicate resource is reported", func(t *testing.T) string {
			return strings.Replace(good, "sinks:\n  - name", "  - {version: v1, resource: configmaps, sinks: [out]}\nsinks:\n  - name", 1)
		}, []string{"resources[1]", "configmaps"}},
		{"a bad duration says what a duration looks like", func(t *testing.T) string { return mutate(t, "30m", "half an hour") },
			[]string{"resources[0].snapshotInterval", "half an hour", "30s"}},
		{"a too-short snapshot interval names the minimum", func(t *testing.T) string { return mutate(t, "30m", "1s") },
			[]string{"resources[0].snapshotInterval", "1s", "10s"}},
		{"an empty resource list is required", func(t *testing.T) string {
			return "apiVersion: kubewire.io/v1alpha1\nkind: Config\ncluster: demo\nresources: []\nsinks:\n  - name: out\n    type: stdout\n"
		}, []string{"resources", "Required"}},
		{"a wrong apiVersion names the supported one", func(t *testing.T) string { return mutate(t, "kubewire.io/v1alpha1", "kubewire.io/v9") },
			[]string{"apiVersion", "kubewire.io/v9", "kubewire.io/v1alpha1"}},
		{"a wrong kind names the expected kind", func(t *testing.T) string { return mutate(t, "kind: Config", "kind: Pipeline") },
			[]string{"kind", "Pipeline", "Config"}},
		{"an invalid cluster name is rejected", func(t *testing.T) string { return mutate(t, "cluster: demo", "cluster: Demo_1") },
			[]string{"cluster", "Demo_1"}},
		{"an unknown operation lists the supported ones", func(t *testing.T) string {
			return mutate(t, "    sinks: [out]\n", "    operations: [created]\n    sinks: [out]\n")
		}, []string{"resources[0].operations[0]", "created", "added"}},
		{"an unsupported sink type lists the supported ones", func(t *testing.T) string { return mutate(t, "type: stdout", "type: carrier-pigeon") },
			[]string{"sinks[0].type", "carrier-pigeon", "stdout"}},
		{"a non-positive qps is rejected", func(t *testing.T) string {
			return mutate(t, "cluster: demo\n", "cluster: demo\nclient:\n  qps: -1\n")
		}, []string{"client.qps", "-1"}},
		{"a burst below qps is rejected", func(t *testing.T) string {
			return mutate(t, "cluster: demo\n", "cluster: demo\nclient:\n  qps: 50\n  burst: 10\n")
		}, []string{"client.burst", "10"}},
		{"malformed YAML is reported with its line", func(t *testing.T) string { return good + "  - [unclosed\n" },
			[]string{"line"}},
		{"a bad namespace name is rejected", func(t *testing.T) string {
			return mutate(t, "    sinks: [out]\n", "    namespaces: [Not_A_Namespace]\n    sinks: [out]\n")
		}, []string{"resources[0].namespaces[0]", "Not_A_Namespace"}},
	}
	if len(cases) < 15 {
		t.Fatalf("the table must hold at least 15 bad configs, has %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, tc.config(t))
			code, out, errOut := run("validate", "--config", path)
			if code != cli.ExitConfig {
				t.Fatalf("exit code %d, want %d; stdout %q stderr %q", code, cli.ExitConfig, out, errOut)
			}
			for _, m := range tc.mention {
				if !strings.Contains(errOut, m) {
					t.Errorf("error output does not mention %q:\n%s", m, errOut)
				}
			}
		})
	}
}

func TestValidateReportsEveryErrorAtOnce(t *testing.T) {
	bad := strings.NewReplacer("cluster: demo", "cluster: ''", "app=web", "app in (", "type: stdout", "type: nope").Replace(good)
	code, _, errOut := run("validate", "--config", write(t, bad))
	if code != cli.ExitConfig {
		t.Fatalf("exit %d", code)
	}
	for _, m := range []string{"cluster", "resources[0].labelSelector", "sinks[0].type"} {
		if !strings.Contains(errOut, m) {
			t.Errorf("missing %q in:\n%s", m, errOut)
		}
	}
}

func TestRunWithABadConfigExitsWith2BeforeConnecting(t *testing.T) {
	code, _, errOut := run("run", "--config", write(t, mutate(t, "app=web", "app in (")), "--kubeconfig", "/nonexistent")
	if code != cli.ExitConfig || !strings.Contains(errOut, "resources[0].labelSelector") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestBadFlagsExitWith2(t *testing.T) {
	for _, args := range [][]string{{"validate"}, {"run", "--config", "x", "--log-level", "loud"}, {"validate", "--no-such-flag"}} {
		if code, _, errOut := run(args...); code != cli.ExitConfig {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestUsageAndConfigPathErrorsExitWith2AndNameTheCulprit(t *testing.T) {
	cfg, kc, dir := write(t, good), write(t, kubeconfig), t.TempDir()
	const kafkaSink = "  - name: events\n    type: kafka\n    kafka: {brokers: [\"kafka:9092\"]}\n"
	kafkaCfg := write(t, good+kafkaSink)
	routedCfg := write(t, mutate(t, "sinks: [out]", "sinks: [out, events]")+kafkaSink)
	cases := []struct {
		name string
		args []string
		// kubeconfigEnv, when set, is $KUBECONFIG for the case.
		kubeconfigEnv string
		mention       []string
	}{
		{"validate with a missing config file names the file",
			[]string{"validate", "--config", "/nonexistent/kubewire.yaml"}, "",
			[]string{"--config", "/nonexistent/kubewire.yaml", "no such file"}},
		{"run with a missing config file names the file",
			[]string{"run", "--config", "/nonexistent/kubewire.yaml", "--kubeconfig", kc}, "",
			[]string{"/nonexistent/kubewire.yaml", "no such file"}},
		{"verify with a missing config file names the file",
			[]string{"verify", "--config", "/nonexistent/kubewire.yaml", "--sink", "out", "--kubeconfig", kc}, "",
			[]string{"/nonexistent/kubewire.yaml", "no such file"}},
		{"a directory given as the config says so",
			[]string{"validate", "--config", dir}, "",
			[]string{dir, "is a directory"}},
		{"a missing --kubeconfig file names the file",
			[]string{"run", "--config", cfg, "--kubeconfig", "/nonexistent/kubeconfig", "--http-address", ""}, "",
			[]string{"/nonexistent/kubeconfig"}},
		{"a missing $KUBECONFIG file names the file and the variable",
			[]string{"run", "--config", cfg, "--http-address", ""}, "/nonexistent/kc.yaml",
			[]string{"$KUBECONFIG", "/nonexistent/kc.yaml"}},
		{"an unknown --context names the context",
			[]string{"run", "--config", cfg, "--kubeconfig", kc, "--context", "nosuch", "--http-address", ""}, "",
			[]string{"nosuch"}},
		{"an --http-address that is not host:port names the flag and the value",
			[]string{"run", "--config", cfg, "--kubeconfig", kc, "--http-address", "9090"}, "",
			[]string{"--http-address", "9090"}},
		{"an --http-address with a port out of range names the flag and the value",
			[]string{"run", "--config", cfg, "--kubeconfig", kc, "--http-address", ":99999"}, "",
			[]string{"--http-address", ":99999"}},
		{"a --timeout that is not a duration is a usage error",
			[]string{"verify", "--config", routedCfg, "--sink", "events", "--kubeconfig", kc, "--timeout", "soon"}, "",
			[]string{"--timeout", "soon"}},
		{"a --timeout of zero is a usage error",
			[]string{"verify", "--config", routedCfg, "--sink", "events", "--kubeconfig", kc, "--timeout", "0s"}, "",
			[]string{"--timeout", "greater than 0"}},
		{"verify with an unknown sink lists the sinks before looking for the cluster",
			[]string{"verify", "--config", cfg, "--sink", "nosuch", "--kubeconfig", "/nonexistent/kubeconfig"}, "",
			[]string{`--sink "nosuch"`, `"out"`}},
		{"verify of a stdout sink says it keeps nothing to read back",
			[]string{"verify", "--config", cfg, "--sink", "out", "--kubeconfig", "/nonexistent/kubeconfig"}, "",
			[]string{`--sink "out"`, "stdout", "nothing to read back"}},
		{"verify of a sink no resource routes to says so",
			[]string{"verify", "--config", kafkaCfg, "--sink", "events", "--kubeconfig", "/nonexistent/kubeconfig"}, "",
			[]string{`--sink "events"`, "no resource"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.kubeconfigEnv)
			defer cli.SetRunApp(func(*app.App, context.Context) (int, error) {
				t.Error("the app ran")
				return 0, nil
			})()
			code, _, errOut := run(tc.args...)
			if code != cli.ExitConfig {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, cli.ExitConfig, errOut)
			}
			for _, m := range tc.mention {
				if !strings.Contains(errOut, m) {
					t.Errorf("stderr does not mention %q:\n%s", m, errOut)
				}
			}
		})
	}
}

func TestVersionPrintsTheVersion(t *testing.T) {
	code, out, _ := run("version")
	if code != cli.ExitOK || !strings.HasPrefix(out, "kubewire ") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
}

func TestTheREADMEConfigExampleIsValid(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no yaml example")
	}
	if code, _, errOut := run("validate", "--config", write(t, example)); code != cli.ExitOK {
		t.Fatalf("the README example does not validate:\n%s", errOut)
	}
}

func TestRunRefusesAProfilingAddressThatIsNotHostPortWithExitCode2(t *testing.T) {
	code, _, errOut := run("run", "--config", write(t, good), "--profiling=6060")
	if code != cli.ExitConfig || !strings.Contains(errOut, "--profiling") {
		t.Fatalf("exit %d, stderr %q; want %d naming --profiling", code, errOut, cli.ExitConfig)
	}
}
