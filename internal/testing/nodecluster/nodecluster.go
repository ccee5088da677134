// Package nodecluster runs a real single-node Kubernetes cluster on the
// host, for tests that run kubewire as Pods: containerd, runc and the CNI
// bridge from Debian's packages; kube-apiserver and etcd from testcluster;
// kube-controller-manager, kube-scheduler, the kubelet and kube-proxy
// (iptables mode) built from the k8s.io/kubernetes module into the same
// testbin cache. Images are built from Go sources and imported into
// containerd; nothing is pulled.
//
// It needs root, and it changes the host while it runs: it adds the bridge
// kubewire0 with 10.244.0.1/24, iptables chains and rules, cgroups under
// /kubepods, mounts and network namespaces, and kernel settings
// (settings.go's hostSysctls). Stop removes or restores all of it, and
// checks that nothing is left; docs/quickstart.md lists it for users.
package nodecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// Cluster is a running single-node cluster.
type Cluster struct {
	// API is the apiserver and etcd.
	API *testcluster.Cluster
	// Config authenticates as testcluster.AdminUser.
	Config *rest.Config
	Client kubernetes.Interface
	// Kubeconfig is a file for Config, for helm and subprocesses.
	Kubeconfig string
	// CurlImageDigest is CurlImage's digest in containerd, for the chart's
	// tests.image.digest.
	CurlImageDigest string

	t       testing.TB
	dir     string
	address string // containerd's socket
	host    *hostState
	procs   []*proc // in start order
	dns     *serviceDNS
}

// Require skips t when the host lacks what the cluster needs, naming it,
// and fails it instead under CI=true, where a missing prerequisite is a
// broken machine rather than a developer's laptop.
func Require(t testing.TB) {
	t.Helper()
	missing := Prerequisites()
	if len(missing) == 0 {
		return
	}
	msg := "the node cluster needs " + strings.Join(missing, ", ") +
		"; see \"A real single-node cluster without kind\" in docs/quickstart.md"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Start brings the node up and returns once it is Ready and the default
// ServiceAccount exists. Everything is stopped and the host restored when
// t's cleanup runs, whether or not the test failed.
func Start(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	progress := logWriter{t}

	bins, err := testcluster.EnsureKubernetesBinaries(ctx, progress, "a minute or more each on 2 cores", testcluster.NodeComponents...)
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: unix socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "kwnode-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, dir: dir, address: filepath.Join(dir, "containerd", "containerd.sock")}
	if c.host, err = saveHost(dir); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	if err := c.host.createBridge(); err != nil {
		t.Fatal(err)
	}
	if err := c.host.apply(); err != nil {
		t.Fatal(err)
	}
	if c.API, err = testcluster.Start(ctx, testcluster.Options{
		Progress: progress, Address: net.ParseIP(GatewayIP), ServiceAccounts: true,
		// The node's name resolves nowhere; its InternalIP is GatewayIP.
		APIServerArgs: []string{"--kubelet-preferred-address-types=InternalIP"},
	}); err != nil {
		t.Fatal(err)
	}
	c.Config = c.API.RESTConfig(testcluster.AdminUser)
	c.Client = kubernetes.NewForConfigOrDie(c.Config)
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := c.API.WriteKubeconfig(c.Kubeconfig, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	if c.dns, err = startServiceDNS(c.Client); err != nil {
		t.Fatal(err)
	}
	if err := c.startContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.loadImages(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.startComponents(bins); err != nil {
		t.Fatal(err)
	}
	c.waitReady(ctx)
	t.Logf("node cluster ready in %s", time.Since(start).Round(100*time.Millisecond))
	return c
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *Cluster) run(name, bin string, args ...string) (*proc, error) {
	p, err := startProc(name, c.path(name+".log"), bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	dir := c.path("containerd")
	for _, d := range []string{dir, filepath.Join(dir, "net.d"), c.path("cni-ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(containerdConfig(dir)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", "10-kubewire.conflist"), []byte(cniConfig(c.path("cni-ipam"))), 0o644); err != nil {
		return err
	}
	p, err := c.run("containerd", "containerd", "--config", filepath.Join(dir, "config.toml"))
	if err != nil {
		return err
	}
	return c.poll(ctx, p, time.Minute, "containerd answering on "+c.address, func() error {
		_, err := imageDigest(ctx, c.address, PauseImage)
		if err != nil && strings.Contains(err.Error(), "not in containerd") {
			return nil // it answered
		}
		return err
	})
}

func (c *Cluster) loadImages(ctx context.Context) error {
	tarballs, err := builtImages(ctx)
	if err != nil {
		return err
	}
	if err := importImages(ctx, c.address, tarballs); err != nil {
		return err
	}
	if c.CurlImageDigest, err = imageDigest(ctx, c.address, CurlImage); err != nil {
		return err
	}
	// The chart names the test image by digest. The CRI finds a local
	// image only by a name it carries, and an import names it by its tag
	// alone: give it its repository@digest name too, as a pull would.
	repo, _, _ := strings.Cut(CurlImage, ":")
	return tagImage(ctx, c.address, CurlImage, repo+"@"+c.CurlImageDigest)
}

func (c *Cluster) startComponents(bins map[string]string) error {
	ports := testkit.FreePorts(c.t, 3)
	kubeletPort, proxyHealthz, proxyMetrics := ports[0], ports[1], ports[2]
	ca := c.path("ca.crt")
	if err := os.WriteFile(ca, c.API.CAPEM(), 0o644); err != nil {
		return err
	}
	files := map[string]string{
		"kubelet.yaml":    kubeletConfig("unix://"+c.address, c.path("pod-logs"), c.path("volume-plugins"), kubeletPort),
		"kube-proxy.yaml": kubeProxyConfig(c.Kubeconfig, proxyHealthz, proxyMetrics),
	}
	for name, content := range files {
		if err := os.WriteFile(c.path(name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, comp := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + c.Kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			// Published to every namespace as kube-root-ca.crt, which the
			// pods' token volumes carry as their ca.crt.
			"--root-ca-file=" + ca,
			"--service-account-private-key-file=" + c.API.ServiceAccountKeyFile(),
			"--cluster-cidr=" + PodSubnet,
		}},
		{"kube-scheduler", []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--secure-port=0"}},
		{"kubelet", []string{
			"--config=" + c.path("kubelet.yaml"),
			"--kubeconfig=" + c.Kubeconfig,
			"--root-dir=" + c.path("kubelet"),
			"--hostname-override=" + NodeName,
			"--node-ip=" + GatewayIP,
		}},
		{"kube-proxy", []string{"--config=" + c.path("kube-proxy.yaml")}},
	} {
		if _, err := c.run(comp.name, bins[comp.name], comp.args...); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits for the node to be Ready without taints and for the
// default namespace's ServiceAccount, which pods need to be admitted.
func (c *Cluster) waitReady(ctx context.Context) {
	c.t.Helper()
	err := c.poll(ctx, nil, 3*time.Minute, "node "+NodeName+" Ready and untainted, default ServiceAccount created", func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(node.Spec.Taints) > 0 {
			return fmt.Errorf("taints %v", node.Spec.Taints)
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = cond.Status == corev1.ConditionTrue
				if !ready {
					return fmt.Errorf("not ready: %s", cond.Message)
				}
			}
		}
		if !ready {
			return errors.New("no Ready condition")
		}
		_, err = c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// poll calls check until it succeeds, within timeout, failing early when p
// (if not nil) or any of the node's processes exits.
func (c *Cluster) poll(ctx context.Context, p *proc, timeout time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		for _, q := range c.procs {
			if q.exited() && !q.stopping {
				return fmt.Errorf("waiting for %s: %s exited (%v); its log ends:\n%s", what, q.name, q.err, q.tail(40))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)\n%s", what, ctx.Err(), last, c.logTails(15))
		case <-tick.C:
		}
	}
}

func (c *Cluster) logTails(n int) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", p.name, n, p.tail(n))
	}
	return b.String()
}

// stop tears everything down in order: pods first, through the kubelet, so
// that their networks are released; then the node's components, leftover
// container processes and shims, the apiserver and etcd; then the host is
// restored and checked.
func (c *Cluster) stop() {
	t := c.t
	if t.Failed() {
		t.Log("node cluster logs:\n" + c.logTails(40))
	}
	var errs []error
	byName := map[string]*proc{}
	for _, p := range c.procs {
		byName[p.name] = p
	}
	// No controller may recreate a pod, and none may be scheduled, while
	// the pods are deleted.
	for _, n := range []string{"kube-controller-manager", "kube-scheduler"} {
		errs = append(errs, byName[n].stop(10*time.Second))
	}
	if kubelet := byName["kubelet"]; kubelet != nil && !kubelet.exited() && c.Client != nil {
		if err := c.deletePods(); err != nil {
			t.Logf("deleting pods through the kubelet: %v (killing them instead)", err)
		}
	}
	for _, n := range []string{"kube-proxy", "kubelet"} {
		errs = append(errs, byName[n].stop(10*time.Second))
	}
	if c.dns != nil {
		c.dns.close()
	}
	if c.host != nil {
		errs = append(errs, killAndWait(c.host.cgroupProcs(), 10*time.Second))
	}
	errs = append(errs, byName["containerd"].stop(10*time.Second))
	errs = append(errs, killAndWait(pidsWithArg(c.address), 10*time.Second))
	if c.API != nil {
		errs = append(errs, c.API.Stop()) // the apiserver before etcd
	}
	if c.host != nil {
		errs = append(errs, c.host.restore())
		if left := c.host.changes(); len(left) > 0 {
			errs = append(errs, fmt.Errorf("left on the host after the teardown:\n  %s", strings.Join(left, "\n  ")))
		}
	}
	errs = append(errs, os.RemoveAll(c.dir))
	if err := errors.Join(errs...); err != nil {
		t.Errorf("stopping the node cluster: %v", err)
	}
}

// deletePods deletes every pod with a short grace period and waits until
// the kubelet has stopped them all, which releases their IP addresses and
// network namespaces through the CNI plugins.
func (c *Cluster) deletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grace := int64(1)
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		err := c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		if err != nil {
			return err
		}
	}
	return c.poll(ctx, nil, time.Minute, "every pod gone", func() error {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods left, e.g. %s/%s", n, pods.Items[0].Namespace, pods.Items[0].Name)
		}
		if procs := c.host.cgroupProcs(); len(procs) > 0 {
			return fmt.Errorf("container processes left: %v", procs)
		}
		return nil
	})
}

// moduleRoot finds the directory of kubewire's go.mod from the working
// directory, which for a test is its package's directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/kubewire/kubewire\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubewire's go.mod not found above the working directory")
		}
		dir = parent
	}
}

// logWriter passes progress lines to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = logWriter{}
