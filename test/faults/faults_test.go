// Package faults_test injects the faults ARCHITECTURE.md promises to survive
// (a restarted apiserver, a relist after history was compacted, kubewire
// killed with SIGKILL) and asserts what a consumer finally sees.
package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

var (
	cluster *testcluster.Cluster
	kube    kubernetes.Interface
	seq     atomic.Int64
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// kube-apiserver as users run it: with its watch cache on.
	// KUBEWIRE_FAULTS_APISERVER_ARGS adds flags, to measure what an
	// operator's choice costs (docs/operations.md, "What survives what").
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr, APIServerArgs: strings.Fields(os.Getenv("KUBEWIRE_FAULTS_APISERVER_ARGS"))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		return 1
	}
	defer c.Stop()
	cluster = c
	kube = kubernetes.NewForConfigOrDie(c.RESTConfig(testcluster.AdminUser))
	code := m.Run()
	printResults()
	if binary != "" {
		// The kubewire binary the process tests built: 50 MB per run.
		os.RemoveAll(filepath.Dir(binary))
	}
	return code
}

func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("faults-%d", seq.Add(1))
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func configFor(ns string) string {
	return fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: faults
dispatch: {drainTimeout: 10s}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
sinks:
  - {name: out, type: stdout}
`, ns)
}

// truth lists the namespace's ConfigMaps as the consumer should see them.
func truth(t *testing.T, ns string) map[string]string {
	t.Helper()
	l, err := kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, cm := range l.Items {
		m["configmaps/"+ns+"/"+cm.Name] = cm.ResourceVersion
	}
	return m
}

// converge applies the streams in order and polls until the view equals the
// cluster, failing with the differences after a minute.
func converge(t *testing.T, ns string, streams ...func() []event.Event) *verify.View {
	t.Helper()
	var v *verify.View
	var diff []string
	want := truth(t, ns)
	deadline := time.Now().Add(time.Minute)
	for {
		v = verify.NewView()
		for _, s := range streams {
			for _, ev := range s() {
				v.Apply(&ev)
			}
		}
		diff = v.Diff("configmaps", want)
		if len(diff) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not converge; differences:\n%s", strings.Join(diff, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(v.Problems) > 0 {
		t.Fatalf("contract violations: %v", v.Problems)
	}
	return v
}

// churn creates, updates and deletes ConfigMaps in ns until stop is closed.
// Errors while the apiserver is away are expected and skipped.
func churn(ns string, stop <-chan struct{}) *churner {
	return churnEvery(ns, stop, 5*time.Millisecond)
}

// churnEvery is churn with one write attempt per tick.
func churnEvery(ns string, stop <-chan struct{}, tick time.Duration) *churner {
	return churnObjects(ns, stop, tick, 20)
}

// churnObjects is churnEvery over the given number of ConfigMap names.
func churnObjects(ns string, stop <-chan struct{}, tick time.Duration, objects int) *churner {
	wg := &churner{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		cms := kube.CoreV1().ConfigMaps(ns)
		pace := time.NewTicker(tick)
		defer pace.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-pace.C:
			}
			name := fmt.Sprintf("cm-%d", i%objects)
			switch i % 3 {
			case 0:
				cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
				wg.wrote(ns, cm, err)
			case 1:
				if cm, err := cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
					cm.Data = map[string]string{"i": fmt.Sprint(i)}
					cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
					wg.wrote(ns, cm, err)
				}
			case 2:
				if i%6 == 2 {
					wg.ok(cms.Delete(ctx, fmt.Sprintf("cm-%d", (i+7)%objects), metav1.DeleteOptions{}))
				}
			}
		}
	}()
	return wg
}

// churner is a running churn: Wait for it after closing stop; Changes is
// how many writes the apiserver accepted.
type churner struct {
	sync.WaitGroup
	changes atomic.Int64

	mu sync.Mutex
	// written is, per key, the resourceVersions the apiserver returned for
	// the churn's creates and updates, in the order they were written.
	written map[string][]string
	// at is, per key, when each of written's versions was acknowledged.
	at map[string][]time.Time
}

func (c *churner) wrote(ns string, cm *corev1.ConfigMap, err error) {
	c.ok(err)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = map[string][]string{}
		c.at = map[string][]time.Time{}
	}
	k := "configmaps/" + ns + "/" + cm.Name
	c.written[k] = append(c.written[k], cm.ResourceVersion)
	c.at[k] = append(c.at[k], time.Now())
}

// checkOrder asserts that, for every key, the events of the stream follow
// the order in which the test itself wrote the versions they carry: a
// version written later never comes out before one written earlier.
func (c *churner) checkOrder(t *testing.T, evs []event.Event) {
	t.Helper()
	bad, checked := c.outOfOrder(evs)
	if len(bad) > 0 {
		t.Fatal(bad[0])
	}
	if checked == 0 {
		t.Fatal("no event carried a version the test wrote; the order check checked nothing")
	}
}

// outOfOrder is checkOrder's finding: every event that carries a version
// written before one its key already came out with, and how many events
// carried a version the test wrote. Copies of an event already out are
// skipped.
func (c *churner) outOfOrder(evs []event.Event) (bad []string, checked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pos := map[string]map[string]int{}
	for k, rvs := range c.written {
		pos[k] = map[string]int{}
		for i, rv := range rvs {
			pos[k][rv] = i
		}
	}
	last := map[string]int{}
	seen := map[string]bool{}
	for _, ev := range evs {
		// A copy of an event already out (a retry, or the suffix a
		// restart replays from its checkpoint) is not a new version.
		if seen[ev.ID()] {
			continue
		}
		seen[ev.ID()] = true
		k := apptest.Ext(ev, encoding.ExtPartitionKey)
		i, ok := pos[k][apptest.Ext(ev, encoding.ExtResourceVersion)]
		if !ok {
			continue // a delete, a marker, or a version written before the churn
		}
		if p, seen := last[k]; seen && i < p {
			bad = append(bad, fmt.Sprintf("%s: version #%d (%s) came out after version #%d", k, i, ev.ID(), p))
		}
		last[k] = max(last[k], i)
		checked++
	}
	return bad, checked
}

// missing returns, per key, the positions (in write order) of the versions
// the test wrote that no event of evs carries.
func (c *churner) missing(evs []event.Event) map[string][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	have := map[string]bool{}
	for _, ev := range evs {
		have[apptest.Ext(ev, encoding.ExtPartitionKey)+"@"+apptest.Ext(ev, encoding.ExtResourceVersion)] = true
	}
	out := map[string][]int{}
	for k, rvs := range c.written {
		for i, rv := range rvs {
			if !have[k+"@"+rv] {
				out[k] = append(out[k], i)
			}
		}
	}
	return out
}

func (c *churner) ok(err error) {
	if err == nil {
		c.changes.Add(1)
	}
}

// results collects one row per fault for the summary table printed after
// the tests (and copied into docs/reliability.md).
var results struct {
	sync.Mutex
	rows [][5]string
}

func record(fault string, changes int64, events, duplicates, divergent int) {
	results.Lock()
	defer results.Unlock()
	results.rows = append(results.rows, [5]string{fault, fmt.Sprint(changes), fmt.Sprint(events), fmt.Sprint(duplicates), fmt.Sprint(divergent)})
}

// printResults prints the table, and appends it to the file named by
// $KUBEWIRE_FAULT_TABLE (CI shows it even though go test hides the output
// of passing packages).
func printResults() {
	results.Lock()
	defer results.Unlock()
	if len(results.rows) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-58s %8s %9s %10s %9s\n", "FAULT", "CHANGES", "DELIVERED", "DUPLICATES", "DIVERGENT")
	for _, r := range results.rows {
		fmt.Fprintf(&b, "%-58s %8s %9s %10s %9s\n", r[0], r[1], r[2], r[3], r[4])
	}
	fmt.Print("\n" + b.String())
	if path := os.Getenv("KUBEWIRE_FAULT_TABLE"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(b.String())
			f.Close()
		}
	}
}

func TestTheConsumerConvergesAcrossAnAPIServerRestartMidStream(t *testing.T) {
	ns := namespace(t)
	kafkaAddr, natsURL := startBrokers(t)
	yaml := brokerConfig(ns, kafkaAddr, natsURL, "", withStdout)
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	k.WaitFor(t, "the initial snapshot", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > 0 })
	stop := make(chan struct{})
	wg := churn(ns, stop)
	stopChurn := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopChurn)
	testkit.Eventually(t, "some live events", func() bool { return len(k.Events(t)) > 30 })
	if err := cluster.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := len(k.Events(t))
	testkit.Eventually(t, "live events after the restart", func() bool { return len(k.Events(t)) > n+30 })
	stopChurn()
	v := converge(t, ns, func() []event.Event { return k.Events(t) })
	wg.checkOrder(t, k.Events(t))
	record("kube-apiserver restarted mid-stream (stdout)", wg.changes.Load(), v.Events, v.Duplicates, 0)
	verifyBrokers(t, yaml, "kube-apiserver restarted mid-stream", wg.changes.Load())
}

func TestARelistAfterCompactionEmitsTheLostDeletesMarkedAndConverges(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cms := kube.CoreV1().ConfigMaps(ns)
	for i := range 10 {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	proxy, err := cluster.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	kafkaAddr, natsURL := startBrokers(t)
	yaml := brokerConfig(ns, kafkaAddr, natsURL, "", withStdout)
	k := apptest.Start(t, yaml, proxy.RESTConfig(cluster, testcluster.AdminUser))
	k.WaitFor(t, "the initial snapshot", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > 0 })

	// Cut kubewire off, change the cluster behind its back, and compact the
	// history it would resume its watch from.
	proxy.Cut()
	for i := range 4 {
		if err := cms.Delete(ctx, fmt.Sprintf("cm-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := cms.Get(ctx, "cm-5", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"changed": "while cut off"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new-while-cut"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	compacted, err := cluster.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ForgetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()

	v := converge(t, ns, func() []event.Event { return k.Events(t) })
	record("watch cut, history compacted, relist (stdout)", 16, v.Events, v.Duplicates, 0)
	// The relist is declared: one gap, from where the watch was to the
	// relist's version, and a snapshot after it. The view can converge on
	// the relist's changes alone, before the snapshot's completed marker
	// is written: wait for it before judging the stream.
	testkit.Eventually(t, "a snapshot completed after the gap", func() bool {
		evs := k.Events(t)
		i := slices.IndexFunc(evs, func(ev event.Event) bool { return ev.Type() == encoding.TypeGap })
		return i >= 0 && apptest.CountCompleted(evs[i:], "configmaps") > 0
	})
	evs := k.Events(t)
	gapAt := -1
	for i, ev := range evs {
		if ev.Type() != encoding.TypeGap {
			continue
		}
		if gapAt >= 0 {
			t.Fatalf("two gap events for one relist: %s and %s", evs[gapAt].ID(), ev.ID())
		}
		gapAt = i
		var g encoding.Gap
		if err := ev.DataAs(&g); err != nil {
			t.Fatal(err)
		}
		from, _ := strconv.ParseInt(g.From, 10, 64)
		to, _ := strconv.ParseInt(g.To, 10, 64)
		if to < compacted || from >= to || g.Reason != "expired" {
			t.Fatalf("gap %+v, want (the watch's last version, a version at or after the compaction at %d], reason expired", g, compacted)
		}
	}
	if gapAt < 0 {
		t.Fatal("the relist after the compaction declared no gap")
	}
	verifyBrokers(t, yaml, "watch cut, history compacted, relist", 16)
	marked := 0
	for _, ev := range k.Events(t) {
		if ev.Type() == encoding.TypeDeleted {
			if apptest.Ext(ev, encoding.ExtFinalStateUnknown) != "true" {
				t.Errorf("delete %s seen only through the relist is not marked finalstateunknown", ev.ID())
			}
			marked++
		}
	}
	if marked != 4 {
		t.Fatalf("got %d deletes, want the 4 made while kubewire was cut off", marked)
	}
}

func TestKubewireKilledWithSIGKILLConvergesAfterARestartIncludingDeletesMadeWhileDown(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	k := newProcs(t, ns)
	kafkaAddr, natsURL := startBrokers(t)
	yaml := brokerConfig(ns, kafkaAddr, natsURL, "dispatch: {drainTimeout: 10s}\n", withStdout)
	if err := os.WriteFile(k.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(out string) (*exec.Cmd, func() []event.Event) { return k.start(t, out) }
	first, stream1 := run("first.jsonl")
	testkit.Eventually(t, "the first snapshot", func() bool { return apptest.CountCompleted(stream1(), "configmaps") > 0 })
	stop := make(chan struct{})
	wg := churn(ns, stop)
	testkit.Eventually(t, "live events", func() bool { return len(stream1()) > 40 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	close(stop)
	wg.Wait()

	// While kubewire is down: delete objects it has seen, change others,
	// create new ones.
	seen := apptest.ByKey(stream1())
	deleted := 0
	for key := range seen {
		name := key[strings.LastIndexByte(key, '/')+1:]
		if deleted < 3 {
			err := kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
			if err == nil {
				deleted++
			} else if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	if deleted == 0 {
		t.Fatal("found nothing to delete while kubewire was down")
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "born-while-down"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	_, stream2 := run("second.jsonl")
	v := converge(t, ns, stream1, stream2)
	wg.checkOrder(t, append(stream1(), stream2()...))
	record("kubewire SIGKILLed, deletes while down, restarted (stdout)", wg.changes.Load()+int64(deleted)+1, v.Events, v.Duplicates, 0)
	verifyBrokers(t, yaml, "kubewire SIGKILLed, deletes while down, restarted", wg.changes.Load()+int64(deleted)+1)
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// procs runs kubewire binaries, as a user or Kubernetes would, against the
// test cluster, each writing its stdout sink to a file.
type procs struct {
	dir, kubeconfig, config string
	// stderr is each run's log, by its output file name, for tests that
	// report what kubewire said.
	stderr map[string]*testkit.Buffer
	// waits is each run's cmd.Wait, callable more than once and from
	// more than one goroutine.
	waits map[string]func() error
}

func newProcs(t *testing.T, ns string) *procs {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubewire-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "kubewire")
		if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/kubewire").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build kubewire: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	p := &procs{dir: t.TempDir()}
	p.kubeconfig = filepath.Join(p.dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(p.kubeconfig, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	p.config = filepath.Join(p.dir, "kubewire.yaml")
	if err := os.WriteFile(p.config, []byte(configFor(ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ownSpool gives the config a spool directory of the test's own when it
// names none: the default is one directory for the whole machine, where a
// run would replay the events another test, or an earlier run, left behind.
// Restarts within one test share it, as a restarted pod keeps its volume.
func (p *procs) ownSpool(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", p.config, err)
	}
	d, _ := cfg["dispatch"].(map[string]any)
	if d == nil {
		d = map[string]any{}
		cfg["dispatch"] = d
	}
	if _, ok := d["spoolDir"]; ok {
		return
	}
	d["spoolDir"] = filepath.Join(p.dir, "spool")
	if b, err = yaml.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs kubewire with extra flags, its events going to the file out.
// It returns the process and a reader of what it has written so far.
func (p *procs) start(t *testing.T, out string, flags ...string) (*exec.Cmd, func() []event.Event) {
	t.Helper()
	f, err := os.Create(filepath.Join(p.dir, out))
	if err != nil {
		t.Fatal(err)
	}
	p.ownSpool(t)
	args := append([]string{"run", "--config", p.config, "--kubeconfig", p.kubeconfig, "--http-address", ""}, flags...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout = f
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	if p.stderr == nil {
		p.stderr = map[string]*testkit.Buffer{}
	}
	p.stderr[out] = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wait := sync.OnceValue(cmd.Wait)
	if p.waits == nil {
		p.waits = map[string]func() error{}
	}
	p.waits[out] = wait
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = wait()
		f.Close()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", out, stderr.String())
		}
	})
	return cmd, func() []event.Event {
		b, _ := os.ReadFile(f.Name())
		return apptest.Parse(t, string(b))
	}
}
