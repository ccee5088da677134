package packaging_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// The real kube-apiserver and etcd start on first use, not in TestMain:
// most tests here only render the chart and should not wait ~10s for a
// cluster they never touch. One cluster then serves every test of the
// package; each works in namespaces of its own.
var (
	clusterOnce sync.Once
	cluster     *testcluster.Cluster
	clusterErr  error
	seq         atomic.Int64
	repoRoot    string
	chartDir    string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := packaging.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	chartDir = filepath.Join(root, packaging.ChartPath)
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test cluster:", err)
		}
	}
	return code
}

// testCluster starts the shared cluster once, or fails the test with the
// reason it could not.
func testCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cluster, clusterErr = testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr})
	})
	if clusterErr != nil {
		t.Fatalf("starting the test cluster: %v", clusterErr)
	}
	return cluster
}

func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(testCluster(t).RESTConfig(testcluster.AdminUser))
}

// unique returns a name no other test of this process uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%10000, seq.Add(1))
}

// createNamespace creates a namespace that enforces the restricted Pod
// Security Standard, as deploy/kubewire.yaml's does, so that objects applied
// there are held to it.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	if _, err := adminClient(t).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// values parses a values overlay written as YAML.
func values(t *testing.T, y string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatalf("values: %v\n%s", err, y)
	}
	return v
}

// render renders the chart as release name in namespace ns with the values
// overlay y, failing the test on any error.
func render(t *testing.T, name, ns, y string) *packaging.Rendered {
	t.Helper()
	r, err := packaging.Render(chartDir, packaging.Release{Name: name, Namespace: ns, Values: values(t, y)})
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// refusesToRender renders the chart with vals and requires an error that
// says every part of want.
func refusesToRender(t *testing.T, vals string, want []string) {
	t.Helper()
	_, err := packaging.Render(chartDir, packaging.Release{Name: "kw", Namespace: "platform", Values: values(t, vals)})
	testkit.ErrorSays(t, err, want...)
}
