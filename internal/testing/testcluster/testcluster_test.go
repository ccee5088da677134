package testcluster_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	c, err := testcluster.Start(ctx, testcluster.Options{
		Progress: testWriter{t},
		Users:    []testcluster.User{{Name: "limited"}},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %s", time.Since(start).Round(time.Millisecond))
	defer c.Stop()

	admin := kubernetes.NewForConfigOrDie(c.RESTConfig(testcluster.AdminUser))
	listNamespaces := func() {
		t.Helper()
		nss, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing namespaces as admin: %v", err)
		}
		if len(nss.Items) == 0 {
			t.Fatal("no namespaces listed")
		}
	}
	listNamespaces()

	limited := kubernetes.NewForConfigOrDie(c.RESTConfig("limited"))
	_, err = limited.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing configmaps as limited: got %v, want Forbidden", err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerVersion(); err != nil {
		t.Fatalf("server version via kubeconfig: %v", err)
	}

	restart := time.Now()
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatalf("RestartAPIServer: %v", err)
	}
	t.Logf("RestartAPIServer took %s", time.Since(restart).Round(time.Millisecond))
	listNamespaces()

	pids := c.PIDs()
	if len(pids) != 2 {
		t.Fatalf("PIDs() = %v, want etcd and kube-apiserver", pids)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	for _, pid := range pids {
		waitGone(t, pid, 5*time.Second)
	}
}

// waitGone fails the test unless pid disappears within timeout.
func waitGone(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("process %d still exists %s after Stop", pid, timeout)
		case <-tick.C:
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
