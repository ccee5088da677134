package nodecluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// ChartPackage packages charts/kubewire with the command `make release`
// runs for it (internal/tools/packaging/cmd/chartpkg), once per test process,
// and loads the archive, so tests install what a user downloads.
func ChartPackage(t testing.TB) *chart.Chart {
	t.Helper()
	shared.chart.once.Do(func() { chartPath, shared.chart.err = packageChart() })
	if shared.chart.err != nil {
		t.Fatal(shared.chart.err)
	}
	ch, err := loader.Load(chartPath)
	if err != nil {
		t.Fatalf("loading %s: %v", chartPath, err)
	}
	return ch
}

var chartPath string

func packageChart() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := sharedDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(context.Background(), "go", "run", "-trimpath", "./internal/tools/packaging/cmd/chartpkg", "-o", dir)
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w\n%s", err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), nil
}

// Helm returns Helm's action configuration for releases in namespace, as
// the helm CLI builds it from a kubeconfig, with its debug log in t's.
func (c *Cluster) Helm(t testing.TB, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.Kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(format string, v ...any) {
		t.Logf("helm: "+format, v...)
	}); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return cfg
}

// ImageValues are the chart values that run kubewire from KubewireImage,
// and `helm test` from CurlImage, both imported rather than pulled.
func (c *Cluster) ImageValues() map[string]any {
	repo, tag, _ := strings.Cut(KubewireImage, ":")
	curlRepo, _, _ := strings.Cut(CurlImage, ":")
	return map[string]any{
		"image": map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"tests": map[string]any{"image": map[string]any{"repository": curlRepo, "digest": c.CurlImageDigest}},
	}
}

// Exec runs command in a container of a pod through the apiserver and the
// kubelet, as kubectl exec does, and returns what it wrote.
func (c *Cluster) Exec(ctx context.Context, namespace, pod, container string, command ...string) (stdout, stderr string, err error) {
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}
