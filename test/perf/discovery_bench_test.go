//go:build bench

package perf

// BenchmarkDiscoveryCost is what a `discover` entry costs (issue 43),
// measured on the shipped binary against the test kube-apiserver (defaults,
// watch cache on) holding all its built-in resources plus 40
// CustomResourceDefinitions with a few objects each. It runs kubewire
// twice on the same cluster: once with one `discover` entry, once with 5
// resources named by hand, and reports side by side:
//
//   - start: from the process's start to the last resource's
//     snapshot.completed marker on the stdout sink;
//   - requests at start: the apiserver's own apiserver_request_total
//     (read from its /metrics as admin) between the process's start and
//     the complete snapshot, by verb and resource: LISTs, WATCHes and
//     SelfSubjectAccessReview POSTs, and the most LISTs of one resource;
//   - idle, over KUBEWIRE_DISCOVERY_IDLE (default 2 min) with nothing
//     changing: CPU (utime+stime from /proc/<pid>/stat), wakes (voluntary
//     plus involuntary context switches summed over /proc/<pid>/task/*),
//     checkpoint Lease writes (kubewire_checkpoint_writes_total{result="ok"}),
//     and every apiserver request per minute, beside the apiserver's own
//     traffic measured with no kubewire running;
//   - memory: VmRSS and VmHWM, and the Go heap after a forced GC
//     (HeapAlloc from --profiling's /debug/pprof/heap?gc=1&debug=1)
//     divided by the objects the snapshot held.
//
// KUBEWIRE_DISCOVERY_CRDS sets the number of CRDs (default 40, the
// issue's cluster). It only runs with KUBEWIRE_DISCOVERY_COST=1 (make
// bench-discovery), one iteration:
//
//	KUBEWIRE_DISCOVERY_COST=1 go test -tags bench -run '^$' -bench DiscoveryCost -benchtime 1x -v -timeout 30m ./test/perf

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

const (
	discoveryGroups        = 8 // the CRDs are spread over this many groups
	discoveryObjectsPerCRD = 5
	discoveryNS            = "discovery-cost"
	// discoveryHeapObjects ConfigMaps measure the heap per cached object.
	discoveryHeapObjects = 2000
)

func BenchmarkDiscoveryCost(b *testing.B) {
	if os.Getenv("KUBEWIRE_DISCOVERY_COST") == "" {
		b.Skip("set KUBEWIRE_DISCOVERY_COST=1 (make bench-discovery)")
	}
	crds := 40
	if v := os.Getenv("KUBEWIRE_DISCOVERY_CRDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("KUBEWIRE_DISCOVERY_CRDS=%q: want a count of at least 1", v)
		}
		crds = n
	}
	idle := 2 * time.Minute
	if v := os.Getenv("KUBEWIRE_DISCOVERY_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("KUBEWIRE_DISCOVERY_IDLE: %v", err)
		}
		idle = d
	}
	rc := cluster.RESTConfig(testcluster.AdminUser)
	kube := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	installDiscoveryCRDs(b, kube, dyn, crds)
	bin := buildKubewireBinary(b)

	// The apiserver's own traffic, with no kubewire running: what the
	// idle windows are compared with.
	base0 := apiserverRequests(b, kube)
	baseFrom := time.Now()
	testkit.Within(b, 2*idle, "the apiserver's own traffic measured", func() bool { return time.Since(baseFrom) >= idle/2 })
	own := apiserverRequests(b, kube).since(base0).perMinute(time.Since(baseFrom))
	b.Logf("RESULT apiserver alone: %.0f requests/min (%s)", own.total(), own.top(6))

	modes := []struct{ name, resources string }{
		{"named5", `
  - {version: v1, resource: configmaps, sinks: [out]}
  - {version: v1, resource: serviceaccounts, sinks: [out]}
  - {group: rbac.authorization.k8s.io, version: v1, resource: clusterroles, sinks: [out]}
  - {group: apps, version: v1, resource: deployments, sinks: [out]}
  - {group: g0.cost.kubewire.io, version: v1, resource: widget0s, sinks: [out]}
`},
		{"discover", `
  - {discover: {}, sinks: [out]}
`},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			cfg := `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: bench
dispatch: {spoolDir: ` + filepath.Join(b.TempDir(), "spool") + `}
sinks:
  - {name: out, type: stdout}
resources:` + m.resources
			want := selectedResources(b, kube, cfg)
			measureDiscoveryCost(b, bin, cfg, want, idle, own)
		})
	}
}

// installDiscoveryCRDs creates the CRDs and their objects once, and waits
// until discovery serves every one.
func installDiscoveryCRDs(b *testing.B, kube kubernetes.Interface, dyn dynamic.Interface, n int) {
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: discoveryNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	var gvrs []schema.GroupVersionResource
	kinds := map[string]string{}
	for i := range n {
		group := fmt.Sprintf("g%d.cost.kubewire.io", i%discoveryGroups)
		plural, kind := fmt.Sprintf("widget%ds", i), fmt.Sprintf("Widget%d", i)
		gvrs = append(gvrs, schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural})
		kinds[plural] = kind
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": plural + "." + group},
			"spec": map[string]any{
				"group": group, "scope": "Namespaced",
				"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			},
		}}
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	for _, gvr := range gvrs {
		res := dyn.Resource(gvr).Namespace(discoveryNS)
		testkit.Within(b, time.Minute, gvr.Resource+" served", func() bool {
			_, err := res.List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil
		})
		for j := range discoveryObjectsPerCRD {
			o := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": gvr.GroupVersion().String(), "kind": kinds[gvr.Resource],
				"metadata": map[string]any{"name": fmt.Sprintf("w-%d", j)},
				"spec":     map[string]any{"size": j, "color": "blue"},
			}}
			if _, err := res.Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		}
	}
	disc := kube.Discovery()
	testkit.Within(b, time.Minute, "every CRD in discovery", func() bool {
		served, _, err := app.ServedResources(disc, slog.New(slog.DiscardHandler))
		if err != nil {
			return false
		}
		found := 0
		for _, g := range served {
			if strings.HasSuffix(g.Group, ".cost.kubewire.io") {
				found++
			}
		}
		return found == n
	})
}

// selectedResources is how many resources cfg streams on the cluster as it
// is: what kubewire's discovery selects, computed the way it does.
func selectedResources(b *testing.B, kube kubernetes.Interface, cfg string) int {
	c, err := config.Parse([]byte(cfg), app.DefaultRegistry())
	if err != nil {
		b.Fatal(err)
	}
	served, _, err := app.ServedResources(discovery.DiscoveryInterface(kube.Discovery()), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return len(c.Expand(served))
}

func measureDiscoveryCost(b *testing.B, bin, cfg string, want int, idle time.Duration, own requestCounts) {
	kube := kubernetes.NewForConfigOrDie(cluster.RESTConfig(testcluster.AdminUser))
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, testcluster.AdminUser); err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "kubewire.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "out.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(b))
	paddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(b))
	// A checkpoint Lease of the run's own: its writes are what is counted.
	lease := fmt.Sprintf("%s/cost-%d", discoveryNS, time.Now().UnixNano())

	before := apiserverRequests(b, kube)
	watches0 := apiserverWatches(b, kube)
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--kubeconfig", kubeconfig,
		"--http-address", addr, "--profiling="+paddr, "--checkpoint", lease)
	cmd.Stdout = out
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	k := &binaryProcess{cmd: cmd, metrics: "http://" + addr + "/metrics", stderr: stderr}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if b.Failed() {
			b.Logf("kubewire stderr:\n%s", k.stderrTail())
		}
	})

	var completed, records int
	testkit.Within(b, 5*time.Minute, fmt.Sprintf("%d snapshot.completed markers", want), func() bool {
		completed, records = countSnapshot(b, out.Name())
		return completed >= want
	}, func() string { return fmt.Sprintf("%d of %d\n%s", completed, want, k.stderrTail()) })
	toSnapshot := time.Since(started)
	atStart := apiserverRequests(b, kube).since(before)
	// A WATCH counts in apiserver_request_total only when it ends: count
	// the open ones instead, once every resource's has started.
	var watches float64
	testkit.Within(b, time.Minute, "a watch per resource", func() bool {
		watches = apiserverWatches(b, kube) - watches0
		return watches >= float64(completed)
	})

	// Idle: let the first checkpoint write and the startup's garbage
	// settle, then measure a window with nothing changing.
	testkit.Within(b, time.Minute, "the first checkpoint written", func() bool {
		m, ok := scrapeMetric(k.metrics, "kubewire_checkpoint_writes_total", `result="ok"`)
		return ok && m >= 1
	}, k.stderrTail)
	settle := time.Now()
	testkit.Within(b, time.Minute, "10 s to settle", func() bool { return time.Since(settle) >= 10*time.Second })
	w0, _ := scrapeMetric(k.metrics, "kubewire_checkpoint_writes_total", `result="ok"`)
	r0 := apiserverRequests(b, kube)
	p0 := k.sample(b)
	from := time.Now()
	testkit.Within(b, 2*idle, "the idle window", func() bool { return time.Since(from) >= idle })
	p1 := k.sample(b)
	window := time.Since(from)
	idleReq := apiserverRequests(b, kube).since(r0).perMinute(window)
	w1, _ := scrapeMetric(k.metrics, "kubewire_checkpoint_writes_total", `result="ok"`)
	switches, gone := p1.switchesSince(p0)
	cpu := p1.cpu - p0.cpu

	rss, hwm := procStatusKB(b, cmd.Process.Pid, "VmRSS:"), procStatusKB(b, cmd.Process.Pid, "VmHWM:")
	heap := heapAfterGCOf(b, "http://"+paddr)

	// Heap per cached object, apart from each informer's fixed cost: the
	// heap a batch of ConfigMaps adds (every mode streams configmaps).
	added := addConfigMaps(b, kube, discoveryHeapObjects)
	testkit.Within(b, 2*time.Minute, "the ConfigMaps streamed", func() bool {
		data, err := os.ReadFile(out.Name())
		return err == nil && bytes.Count(data, []byte(`"io.kubewire.object.added"`)) >= added
	}, k.stderrTail)
	heapMore := heapAfterGCOf(b, "http://"+paddr)
	perObject := (float64(heapMore) - float64(heap)) / float64(added)
	deleteConfigMaps(b, kube)

	lists, listsMax := atStart.verb("LIST")
	reviews := atStart[requestKey{"POST", "selfsubjectaccessreviews"}]
	rulesReviews := atStart[requestKey{"POST", "selfsubjectrulesreviews"}]
	b.Logf("RESULT %s: %d resources, %d objects; first complete snapshot %s; at start %d LIST (at most %.0f of one resource: %s), %.0f WATCH open, %.0f access reviews, %.0f rules reviews, %.0f requests in all (%s)",
		b.Name(), completed, records, toSnapshot.Round(10*time.Millisecond), int(lists), listsMax, atStart.only("LIST").top(3), watches, reviews, rulesReviews, atStart.total(), atStart.except("LIST").top(6))
	b.Logf("RESULT %s: idle %s: CPU %.2f%% of one core, %.1f wakes/s (threads gone %d), %.1f checkpoint Lease writes/min, %.0f apiserver requests/min against %.0f with no kubewire (%s)",
		b.Name(), window.Round(time.Second), 100*cpu.Seconds()/window.Seconds(), float64(switches)/window.Seconds(), gone,
		(w1-w0)*60/window.Seconds(), idleReq.total(), own.total(), idleReq.minus(own).top(6))
	b.Logf("RESULT %s: RSS %d MB (peak %d MB); heap after GC %.1f MB for %d resources and %d objects (%.0f KB per resource, all counted); %.2f KB per cached object added (%d ConfigMaps: heap after GC %.1f MB)",
		b.Name(), rss>>10, hwm>>10, float64(heap)/(1<<20), completed, records, float64(heap)/1024/float64(completed), perObject/1024, added, float64(heapMore)/(1<<20))
	b.ReportMetric(toSnapshot.Seconds(), "s-to-snapshot")
	b.ReportMetric(100*cpu.Seconds()/window.Seconds(), "idle-%cpu")
	b.ReportMetric(float64(switches)/window.Seconds(), "idle-wakes/s")
	b.ReportMetric((w1-w0)*60/window.Seconds(), "lease-writes/min")
	b.ReportMetric(lists, "start-LISTs")
	b.ReportMetric(reviews+rulesReviews, "start-reviews")
	b.ReportMetric(float64(completed), "resources")
	b.ReportMetric(float64(rss>>10), "RSS-MB")
	b.ReportMetric(perObject, "heap-B/object")
}

// addConfigMaps creates n ConfigMaps of about 300 bytes in discoveryNS.
func addConfigMaps(b *testing.B, kube kubernetes.Interface, n int) int {
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(discoveryNS)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("heap-%05d", i), Labels: map[string]string{"app": "discovery-cost"}},
			Data: map[string]string{"value": strings.Repeat("x", 200)}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// deleteConfigMaps removes what addConfigMaps created, so that the next
// mode starts on the same cluster.
func deleteConfigMaps(b *testing.B, kube kubernetes.Interface) {
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(discoveryNS)
	sel := metav1.ListOptions{LabelSelector: "app=discovery-cost"}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		b.Fatal(err)
	}
	testkit.Within(b, time.Minute, "the ConfigMaps deleted", func() bool {
		l, err := cms.List(ctx, sel)
		return err == nil && len(l.Items) == 0
	})
}

// countSnapshot counts the snapshot.completed markers and synced records
// the stdout sink wrote to path so far.
func countSnapshot(b *testing.B, path string) (completed, records int) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	completed = bytes.Count(data, []byte(`"io.kubewire.snapshot.completed"`))
	records = bytes.Count(data, []byte(`"io.kubewire.object.synced"`))
	return completed, records
}

// requestKey is one verb on one resource, as apiserver_request_total
// labels it.
type requestKey struct{ verb, resource string }

type requestCounts map[requestKey]float64

var requestLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiserverRequests reads apiserver_request_total from the apiserver's
// /metrics, summed by verb and resource.
func apiserverRequests(b *testing.B, kube kubernetes.Interface) requestCounts {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("apiserver /metrics: %v", err)
	}
	out := requestCounts{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		var k requestKey
		labels := line[:strings.LastIndexByte(line, '}')]
		for _, m := range requestLabel.FindAllStringSubmatch(labels, -1) {
			switch m[1] {
			case "verb":
				k.verb = m[2]
			case "resource":
				k.resource = m[2]
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[k] += v
		}
	}
	return out
}

func (c requestCounts) since(c0 requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - c0[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (c requestCounts) minus(o requestCounts) requestCounts { return c.since(o) }

func (c requestCounts) only(verb string) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if k.verb == verb {
			out[k] = v
		}
	}
	return out
}

func (c requestCounts) except(verb string) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if k.verb != verb {
			out[k] = v
		}
	}
	return out
}

// apiserverWatches is how many WATCH requests the apiserver is serving
// (apiserver_longrunning_requests).
func apiserverWatches(b *testing.B, kube kubernetes.Interface) float64 {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("apiserver /metrics: %v", err)
	}
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				n += v
			}
		}
	}
	return n
}

func (c requestCounts) perMinute(d time.Duration) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		out[k] = v * 60 / d.Seconds()
	}
	return out
}

func (c requestCounts) total() float64 {
	var n float64
	for _, v := range c {
		n += v
	}
	return n
}

// verb is the requests of one verb in all, and the most on one resource.
func (c requestCounts) verb(verb string) (all, most float64) {
	for k, v := range c {
		if k.verb == verb {
			all += v
			most = max(most, v)
		}
	}
	return all, most
}

func (c requestCounts) top(n int) string {
	keys := make([]requestKey, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %s %.1f", k.verb, k.resource, c[k]))
	}
	return strings.Join(parts, ", ")
}

// scrapeMetric sums the samples of name whose labels contain match.
func scrapeMetric(url, name, match string) (float64, bool) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total, sc.Err() == nil
}

func procStatusKB(b *testing.B, pid int, field string) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// heapAfterGCOf is the process's HeapAlloc after a forced GC, from the
// runtime.MemStats block the text heap profile ends with.
func heapAfterGCOf(b *testing.B, pprofBase string) uint64 {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(pprofBase + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	b.Fatalf("no HeapAlloc in the heap profile:\n%.2000s", body)
	return 0
}
