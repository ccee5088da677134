package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/nats"
)

// The resume-and-gap tests (issue 26): a watch goes on from its checkpoint
// after kubewire ends, and where it cannot, the stream says which versions
// may be missing.

// holdingOutput records Changes and acknowledges each at once, except the
// changes of the held key, whose Marks it keeps until release.
type holdingOutput struct {
	held string

	mu      sync.Mutex
	got     []*informer.Change
	holding []informer.Mark
}

func (o *holdingOutput) Enqueue(c *informer.Change) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, c)
	if o.held != "" && c.Key == o.held {
		o.holding = append(o.holding, c.Mark)
		return
	}
	c.Mark.Done()
}

// hold starts holding key's changes.
func (o *holdingOutput) hold(key string) {
	o.mu.Lock()
	o.held = key
	o.mu.Unlock()
}

func (o *holdingOutput) changes() []*informer.Change {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// watcherOf is an informer.Watcher of ns's ConfigMaps on the test cluster.
func watcherOf(t *testing.T, ns string, out informer.Output) *informer.Watcher {
	t.Helper()
	return watcherOfNamespaces(t, []string{ns}, out)
}

// watcherOfNamespaces watches each of nss on its own (watchPerNamespace).
func watcherOfNamespaces(t *testing.T, nss []string, out informer.Output) *informer.Watcher {
	t.Helper()
	return watcherWithCache(t, nss, "", out)
}

// watcherWithCache is watcherOfNamespaces with the given cache mode.
func watcherWithCache(t *testing.T, nss []string, cache string, out informer.Output) *informer.Watcher {
	t.Helper()
	perNamespace := true
	rc := cluster.RESTConfig(testcluster.AdminUser)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	rawREST, err := raw.NewRESTClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return informer.NewWatcher(informer.Options{
		Cluster: "faults",
		Resource: config.Resource{Version: "v1", Resource: "configmaps", Namespaces: nss, Sinks: []string{"out"},
			Operations: config.Operations(), Updates: "all", WatchPerNamespace: &perNamespace, Cache: cache},
		Dynamic: dyn,
		REST:    rawREST,
		Mapper:  restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc)),
		Out:     out,
	})
}

// runUntil runs w until the returned stop is called (or the test ends).
func runUntil(t *testing.T, w *informer.Watcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	testkit.Eventually(t, "the initial sync", w.HasSynced)
	return stop
}

func rvNumber(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

func setData(t *testing.T, ns, name, value string) string {
	t.Helper()
	cms := kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"v": value}
	cm, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

func createConfigMaps(t *testing.T, ns string, n int) {
	t.Helper()
	for i := range n {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), configMapNamed(fmt.Sprintf("cm-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// versionsOf lists the resourceVersions of key's object changes, in order.
func versionsOf(cs []*informer.Change, key string) []string {
	var out []string
	for _, c := range cs {
		if c.Key == key && c.Object != nil && !c.IsMarker() {
			out = append(out, c.Object.GetResourceVersion())
		}
	}
	return out
}

func TestTheCheckpointNeverPassesAChangeASinkHoldsAndTheRestartDeliversItAgain(t *testing.T) {
	ns := namespace(t)
	createConfigMaps(t, ns, 5)
	heldKey := "configmaps/" + ns + "/cm-0"
	out := &holdingOutput{}
	w := watcherOf(t, ns, out)
	stop := runUntil(t, w)
	out.hold(heldKey)

	before := setData(t, ns, "cm-1", "before")
	testkit.Eventually(t, "the checkpoint at the change before the held one", func() bool {
		cp, _ := w.Checkpoint()
		return cp[ns] == before
	}, func() string { return fmt.Sprint(w.Checkpoint()) })
	held := setData(t, ns, "cm-0", "held")
	var later []string
	for i := range 20 {
		later = append(later, setData(t, ns, fmt.Sprintf("cm-%d", 1+i%4), fmt.Sprint(i)))
	}
	last := later[len(later)-1]
	testkit.Eventually(t, "every later change handed to the sink", func() bool {
		return slices.Contains(versionsOf(out.changes(), "configmaps/"+ns+"/cm-4"), last) ||
			slices.Contains(versionsOf(out.changes(), "configmaps/"+ns+"/cm-"+fmt.Sprint(1+19%4)), last)
	})
	cp, _ := w.Checkpoint()
	if rvNumber(t, cp[ns]) >= rvNumber(t, held) {
		t.Fatalf("the checkpoint %s passed the held change %s of %s", cp[ns], held, heldKey)
	}
	if cp[ns] != before {
		t.Fatalf("the checkpoint is %s, want %s: the last change before the held one", cp[ns], before)
	}
	// "Killed": nothing more is acknowledged.
	stop()

	resumed := &holdingOutput{}
	w2 := watcherOf(t, ns, resumed)
	w2.SetResume(&informer.Resume{Streams: cp})
	runUntil(t, w2)
	testkit.Eventually(t, "the held change delivered again", func() bool {
		return slices.Contains(versionsOf(resumed.changes(), heldKey), held)
	}, func() string { return fmt.Sprint(len(resumed.changes()), " changes after the restart") })
	testkit.Eventually(t, "every later change delivered again", func() bool {
		got := map[string]bool{}
		for _, c := range resumed.changes() {
			if c.Object != nil {
				got[c.Object.GetResourceVersion()] = true
			}
		}
		for _, rv := range later {
			if !got[rv] {
				return false
			}
		}
		return true
	})
	for _, c := range resumed.changes() {
		switch {
		case c.Op == informer.OpGap:
			t.Fatalf("a resume from a checkpoint the apiserver still holds declared a gap: %+v", *c.Gap)
		case c.IsMarker() || c.Op == informer.OpSynced:
			t.Fatalf("a resumed start sent a snapshot (%s): it should only load the store", c.Op)
		case rvNumber(t, c.Object.GetResourceVersion()) <= rvNumber(t, cp[ns]):
			t.Fatalf("the resumed watch delivered %s %s, at or before its checkpoint %s", c.Key, c.Object.GetResourceVersion(), cp[ns])
		}
	}
}

func TestNamespacesWatchedOneByOneEachResumeFromTheirOwnCheckpoint(t *testing.T) {
	a, b := namespace(t), namespace(t)
	createConfigMaps(t, a, 2)
	createConfigMaps(t, b, 2)
	out := &holdingOutput{}
	w := watcherOfNamespaces(t, []string{a, b}, out)
	stop := runUntil(t, w)
	ra := setData(t, a, "cm-0", "a1")
	rb := setData(t, b, "cm-0", "b1")
	testkit.Eventually(t, "a checkpoint per namespace", func() bool {
		cp, _ := w.Checkpoint()
		return cp[a] == ra && cp[b] == rb
	}, func() string { return fmt.Sprint(w.Checkpoint()) })
	cp, _ := w.Checkpoint()
	stop()
	var down []string
	for i := range 5 {
		down = append(down, setData(t, a, "cm-1", fmt.Sprint(i)), setData(t, b, "cm-1", fmt.Sprint(i)))
	}
	after := &holdingOutput{}
	w2 := watcherOfNamespaces(t, []string{a, b}, after)
	w2.SetResume(&informer.Resume{Streams: cp})
	runUntil(t, w2)
	testkit.Eventually(t, "every change made while down, in both namespaces", func() bool {
		got := map[string]bool{}
		for _, c := range after.changes() {
			if c.Object != nil {
				got[c.Object.GetResourceVersion()] = true
			}
		}
		for _, rv := range down {
			if !got[rv] {
				return false
			}
		}
		return true
	})
	for _, c := range after.changes() {
		if c.IsMarker() || c.Op == informer.OpSynced {
			t.Fatalf("a resumed start sent %s; want only the changes after each namespace's checkpoint", c.Op)
		}
	}
}

// checkpointOfAStoppedWatcher runs a watcher of three new ConfigMaps in
// ns, changes one, and returns the checkpoint it reached once stopped.
func checkpointOfAStoppedWatcher(t *testing.T, ns string) map[string]string {
	t.Helper()
	createConfigMaps(t, ns, 3)
	w := watcherOf(t, ns, &holdingOutput{})
	stop := runUntil(t, w)
	rv := setData(t, ns, "cm-0", "one")
	testkit.Eventually(t, "the checkpoint at the last change", func() bool {
		cp, _ := w.Checkpoint()
		return cp[ns] == rv
	})
	cp, _ := w.Checkpoint()
	stop()
	return cp
}

func TestAResumeFromACompactedCheckpointDeclaresOneGapThenASnapshot(t *testing.T) {
	ns := namespace(t)
	cp := checkpointOfAStoppedWatcher(t, ns)
	// Down for longer than the history lasts.
	setData(t, ns, "cm-1", "while down")
	if err := kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	compacted, err := cluster.CompactEtcd(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ForgetHistory(context.Background()); err != nil {
		t.Fatal(err)
	}

	after := &holdingOutput{}
	w2 := watcherOf(t, ns, after)
	w2.SetResume(&informer.Resume{Streams: cp})
	runUntil(t, w2)
	cs := after.changes()
	var ops []string
	for _, c := range cs {
		ops = append(ops, string(c.Op))
	}
	if len(cs) < 3 || cs[0].Op != informer.OpGap || cs[1].Op != informer.OpSnapshotStarted {
		t.Fatalf("the stream begins %v, want a gap, then a snapshot", ops)
	}
	g := cs[0].Gap
	if g.From != cp[ns] || g.Namespace != ns || g.Reason != informer.GapExpired {
		t.Fatalf("gap %+v, want from the checkpoint %s, namespace %s, reason %s", *g, cp[ns], ns, informer.GapExpired)
	}
	if rvNumber(t, g.To) < uint64(compacted) {
		t.Fatalf("the gap ends at %s, before the compaction at %d: the relist cannot be older than that", g.To, compacted)
	}
	gaps := 0
	for _, c := range cs {
		if c.Op == informer.OpGap {
			gaps++
		}
	}
	if gaps != 1 {
		t.Fatalf("%d gap events, want 1: %v", gaps, ops)
	}
	if !slices.Contains(ops, string(informer.OpSnapshotCompleted)) {
		t.Fatalf("no completed snapshot after the gap: %v", ops)
	}
}

// The process test: kubewire killed with SIGKILL under churn and started
// again within 10 s resumes every watch, so every version the churn wrote
// reaches the stream, including those written while it was down.
func TestKubewireSIGKILLedUnderChurnResumesWithNoVersionMissingAndNoGap(t *testing.T) {
	mode := "checkpoint"
	if os.Getenv("KUBEWIRE_RESUME_CONTROL") == "1" {
		// The control: the same run without a checkpoint must fail and
		// name the versions it lost.
		mode = "off"
	}
	testSIGKILLResume(t, mode, startBrokers, "kfake/embedded")
}

// testSIGKILLResume runs the SIGKILL test on the brokers start gives.
func testSIGKILLResume(t *testing.T, mode string, start func(*testing.T) (kafkaAddr, natsURL string), brokers string) {
	ns := namespace(t)
	k := newProcs(t, ns)
	kafkaAddr, natsURL := start(t)
	yaml := brokerConfig(ns, kafkaAddr, natsURL, "dispatch: {drainTimeout: 10s}\n", withStdout)
	if err := os.WriteFile(k.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--checkpoint", ns + "/kubewire-checkpoint"}
	if mode == "off" {
		flags = []string{"--checkpoint", "off"}
	}
	run := func(out string, more ...string) (*exec.Cmd, func() []event.Event) {
		return k.start(t, out, append(slices.Clone(flags), more...)...)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	first, stream1 := run("first.jsonl", "--http-address", metricsAddr)
	started := time.Now()
	testkit.Eventually(t, "the first snapshot", func() bool { return apptest.CountCompleted(stream1(), "configmaps") > 0 })
	stop := make(chan struct{})
	wg := churnEvery(ns, stop, 6*time.Millisecond) // about 100 accepted writes a second
	churnStart := time.Now()
	testkit.Eventually(t, "3s of churn and live events", func() bool { return time.Since(churnStart) > 3*time.Second && len(stream1()) > 100 })
	// A checkpoint is saved about once a second.
	testkit.Eventually(t, "a saved checkpoint", func() bool {
		l, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), "kubewire-checkpoint", metav1.GetOptions{})
		return mode == "off" || err == nil && l.Annotations["kubewire.io/checkpoint"] != ""
	})
	// The cost to the apiserver: at most about one checkpoint write a
	// second.
	m, ok := scrape("http://" + metricsAddr + "/metrics")
	if !ok {
		t.Fatal("no metrics from the first kubewire")
	}
	writes, ran := m.sum("kubewire_checkpoint_writes_total", "result", "ok"), time.Since(started)
	t.Logf("%v checkpoint writes in %s of running", writes, ran.Round(time.Millisecond))
	if mode != "off" && writes > ran.Seconds()+1 {
		t.Errorf("%v checkpoint writes in %s: more than one a second", writes, ran)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killed := time.Now()
	// Changes go on while kubewire is down, for a couple of seconds.
	time.Sleep(2 * time.Second) // the downtime itself, not a synchronisation
	_, stream2 := run("second.jsonl")
	if d := time.Since(killed); d > 10*time.Second {
		t.Fatalf("restarted %s after the kill, want within 10s", d)
	}
	restarted := time.Now()
	testkit.Eventually(t, "3s of live events after the restart", func() bool {
		return time.Since(restarted) > 3*time.Second && len(stream2()) > 100
	})
	close(stop)
	wg.Wait()

	all := func() []event.Event { return append(stream1(), stream2()...) }
	converge(t, ns, stream1, stream2)
	wg.checkOrder(t, all())
	var gaps []string
	for _, ev := range all() {
		if ev.Type() == encoding.TypeGap {
			gaps = append(gaps, string(ev.Data()))
		}
	}
	missing := wg.missing(all())
	var names []string
	n := 0
	for k, idx := range missing {
		n += len(idx)
		names = append(names, fmt.Sprintf("%s versions #%v", k, idx))
	}
	slices.Sort(names)
	t.Logf("%d changes written, %d versions missing, %d gaps", wg.changes.Load(), n, len(gaps))
	if n > 0 {
		t.Fatalf("%d versions the churn wrote are in no event:\n%s", n, strings.Join(names, "\n"))
	}
	if len(gaps) > 0 {
		t.Fatalf("a restart within the watch window declared gaps: %v", gaps)
	}
	record("kubewire SIGKILLed under churn, resumed from its checkpoint (stdout, "+brokers+")", wg.changes.Load(), len(all()), 0, 0)
	verifyBrokersOn(t, yaml, "kubewire SIGKILLed under churn, resumed", wg.changes.Load(), brokers)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		everyVersionIn(t, cfg, sink, wg)
	}
}

// everyVersionIn requires every version the churn wrote to be in the
// sink's topic or stream, in order per key, with no gap event.
func everyVersionIn(t *testing.T, cfg *config.Config, sink string, wg *churner) {
	t.Helper()
	var evs []event.Event
	var lost map[string][]int
	testkit.Eventually(t, "every version written in "+sink, func() bool {
		evs = evs[:0]
		for _, p := range readPartitioned(t, cfg, sink) {
			evs = append(evs, p.ev)
		}
		lost = wg.missing(evs)
		return len(lost) == 0
	}, func() string { return fmt.Sprintf("%s lacks versions: %v", sink, lost) })
	wg.checkOrder(t, evs)
	for _, ev := range evs {
		if ev.Type() == encoding.TypeGap {
			t.Fatalf("%s carries a gap event: %s", sink, ev.Data())
		}
	}
}

type partitioned struct {
	part string
	ev   event.Event
}

// readPartitioned reads a sink's events in order, partition by partition.
func readPartitioned(t *testing.T, cfg *config.Config, sink string) []partitioned {
	t.Helper()
	sc, _ := cfg.Sink(sink)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []partitioned
	var err error
	switch blk := sc.Block.(type) {
	case *kafka.Config:
		topic := kafka.TopicName(blk.Topic, cfg.Cluster, "", "v1", "configmaps")
		err = kafka.ReadTopic(ctx, blk, topic, func(r kafka.Record) error {
			if r.Event != nil {
				out = append(out, partitioned{part: strconv.Itoa(r.Partition), ev: *r.Event})
			}
			return nil
		})
	case *nats.Config:
		err = nats.ReadStream(ctx, blk, func(ev *event.Event) error {
			out = append(out, partitioned{ev: *ev})
			return nil
		})
	}
	if err != nil {
		t.Fatalf("read %s: %v", sink, err)
	}
	return out
}

type metricsText string

func scrape(url string) (metricsText, bool) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", false
	}
	return metricsText(b), true
}

// get returns the value of the sample of name whose label has value (the
// first sample of name if label is ""), or 0.
func (m metricsText) get(name, label, value string) float64 {
	sc := bufio.NewScanner(strings.NewReader(string(m)))
	sc.Buffer(nil, 1<<20)
	want := label + `="` + value + `"`
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || label != "" && !strings.Contains(line, want) {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			return f
		}
	}
	return 0
}

// sum adds up the samples of name whose label has value.
func (m metricsText) sum(name, label, value string) float64 {
	var total float64
	want := label + `="` + value + `"`
	for _, line := range strings.Split(string(m), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, want) {
			continue
		}
		if f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += f
		}
	}
	return total
}

// fullSampler scrapes the running kubewire now and then for
// kubewire_spool_full, so that versions written while a spool was full can
// be told apart.

// The new pod after an outage longer than the apiserver's history: its
// checkpoint cannot be resumed, so the stream says which versions may be
// missing (one gap, no wider than (checkpoint, relist]) and a snapshot
// follows. Every version the churn wrote is in the stream or inside the gap.
func TestANewPodPastTheHistoryDeclaresOneGapThenASnapshotAndLosesNothingOutsideIt(t *testing.T) {
	ns := namespace(t)
	k := newProcs(t, ns)
	kafkaAddr, natsURL := startBrokers(t)
	yaml := brokerConfig(ns, kafkaAddr, natsURL, "dispatch: {drainTimeout: 10s}\n", withStdout)
	if err := os.WriteFile(k.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	lease := ns + "/kubewire-checkpoint"
	first, stream1 := k.start(t, "first.jsonl", "--checkpoint", lease)
	testkit.Eventually(t, "the first snapshot", func() bool { return apptest.CountCompleted(stream1(), "configmaps") > 0 })
	stop := make(chan struct{})
	wg := churnEvery(ns, stop, 6*time.Millisecond)
	testkit.Eventually(t, "live events", func() bool { return len(stream1()) > 50 })
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	saved, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), "kubewire-checkpoint", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var entries map[string]checkpoint.Entry
	if err := json.Unmarshal([]byte(saved.Annotations[checkpoint.AnnotationKey]), &entries); err != nil {
		t.Fatal(err)
	}
	cp := entries["configmaps"].Streams[ns]
	// Down while the cluster changes, and longer than its history: etcd
	// compacts what a watch from the checkpoint would need.
	testkit.Eventually(t, "changes while kubewire is down", func() bool { return wg.changes.Load() > int64(len(stream1()))+50 })
	close(stop)
	wg.Wait()
	compacted, err := cluster.CompactEtcd(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.ForgetHistory(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, stream2 := k.start(t, "second.jsonl", "--checkpoint", lease)
	testkit.Eventually(t, "the snapshot after the gap", func() bool { return apptest.CountCompleted(stream2(), "configmaps") > 0 })
	converge(t, ns, stream1, stream2)

	evs := stream2()
	if len(evs) < 2 || evs[0].Type() != encoding.TypeGap || evs[1].Type() != encoding.TypeSnapshotStarted {
		t.Fatalf("the new pod's stream begins %v, want a gap and then a snapshot", typesOf(evs, 3))
	}
	var g encoding.Gap
	if err := evs[0].DataAs(&g); err != nil {
		t.Fatal(err)
	}
	if g.From != cp || rvNumber(t, g.To) < uint64(compacted) || g.Namespace != ns {
		t.Fatalf("gap %+v; want from the checkpoint %s to the relist (at or after the compaction at %d), in namespace %s", g, cp, compacted, ns)
	}
	for _, ev := range evs[1:] {
		if ev.Type() == encoding.TypeGap {
			t.Fatalf("a second gap: %s", ev.Data())
		}
	}
	// Every version written is in a stream, or inside the declared range.
	from, to := rvNumber(t, g.From), rvNumber(t, g.To)
	all := append(stream1(), evs...)
	outside := 0
	wg.mu.Lock()
	written := maps.Clone(wg.written)
	wg.mu.Unlock()
	for key, idx := range wg.missing(all) {
		for _, i := range idx {
			rv := rvNumber(t, written[key][i])
			if rv <= from || rv > to {
				outside++
				t.Errorf("%s version %d (rv %d) is missing and outside the gap (%d, %d]", key, i, rv, from, to)
			}
		}
	}
	t.Logf("gap (%s, %s]; %d versions missing outside it", g.From, g.To, outside)
	verifyBrokers(t, yaml, "new pod past the history: gap, snapshot", wg.changes.Load())
}

func typesOf(evs []event.Event, n int) []string {
	var out []string
	for _, ev := range evs[:min(n, len(evs))] {
		out = append(out, ev.Type())
	}
	return out
}

// The checkpoint Lease on the real apiserver: conditional writes.
func TestSavedCheckpointsReadBackAndAnotherWriterIsOverwrittenOnlyAfterARead(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	rc := cluster.RESTConfig(testcluster.AdminUser)
	a, err := checkpoint.New(rc, ns, "cp", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.New(rc, ns, "cp", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Load(ctx); err != nil || len(got) != 0 {
		t.Fatalf("a missing Lease: %v, %v; want no entries", got, err)
	}
	e1 := map[string]checkpoint.Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "10"}}}
	if err := a.Save(ctx, e1); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(ctx); err != nil || !reflect.DeepEqual(got, e1) {
		t.Fatalf("read back %v, %v; want %v", got, err, e1)
	}
	// b writes; a's next write is conditional on what a last saw, so it
	// is refused once, then a reads again and writes on top, keeping b's
	// other resources.
	e2 := map[string]checkpoint.Entry{"secrets": {Hash: "s", Streams: map[string]string{"ns": "12"}}}
	if err := b.Save(ctx, e2); err != nil {
		t.Fatal(err)
	}
	e3 := map[string]checkpoint.Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "20"}}}
	if err := a.Save(ctx, e3); err == nil {
		t.Fatal("a write over another writer's was not refused")
	}
	if err := a.Save(ctx, e3); err != nil {
		t.Fatal(err)
	}
	got, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]checkpoint.Entry{"configmaps": e3["configmaps"], "secrets": e2["secrets"]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after both wrote: %v, want %v", got, want)
	}
}

// An API server restart under churn, kubewire running, the watch cache on:
// the new cache starts at the current revision, so the watch from where
// the stream was is refused while a LIST at exactly that version still
// succeeds from etcd. The stream must say so at once, with one gap and a
// snapshot, and carry every version outside the gap.
func TestAnAPIServerRestartUnderChurnGivesOneGapThenASnapshotAndEveryVersionOutsideIt(t *testing.T) {
	// Each cache hears of the refused watch its own way.
	for _, cache := range config.CacheModes() {
		t.Run(cache, func(t *testing.T) { testAPIServerRestartUnderChurn(t, cache) })
	}
}

func testAPIServerRestartUnderChurn(t *testing.T, cache string) {
	ns := namespace(t)
	out := &holdingOutput{}
	w := watcherWithCache(t, []string{ns}, cache, out)
	runUntil(t, w)
	stop := make(chan struct{})
	wg := churnEvery(ns, stop, 10*time.Millisecond)
	stopChurn := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopChurn)
	testkit.Eventually(t, "live changes before the restart", func() bool { return len(out.changes()) > 30 })
	if err := cluster.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	gapAt := func(cs []*informer.Change) int {
		return slices.IndexFunc(cs, func(c *informer.Change) bool { return c.Op == informer.OpGap })
	}
	ops := func() string {
		var b strings.Builder
		for _, c := range out.changes() {
			if c.IsMarker() {
				fmt.Fprintf(&b, "%s ", c.Op)
			}
		}
		return "markers so far: " + b.String()
	}
	// A change made after the restart reaches the stream within seconds:
	// after a gap and the snapshot that follows it, or with no gap at all
	// when the new watch cache could serve the watch from where the
	// stream was (nothing was written in between).
	probe, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), configMapNamed("after-the-restart"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probeKey := "configmaps/" + ns + "/" + probe.Name
	testkit.Within(t, 30*time.Second, "a change made after the restart", func() bool {
		return slices.Contains(versionsOf(out.changes(), probeKey), probe.ResourceVersion)
	}, ops)
	if gapAt(out.changes()) >= 0 {
		// The relist that declared the gap sends its differences (the
		// probe among them, if it listed it) before the snapshot that
		// follows, so the snapshot may still be on its way.
		testkit.Within(t, 30*time.Second, "a completed snapshot after the gap", func() bool {
			cs := out.changes()
			return slices.ContainsFunc(cs[gapAt(cs):], func(c *informer.Change) bool { return c.Op == informer.OpSnapshotCompleted })
		}, ops)
	}
	n := len(out.changes())
	testkit.Eventually(t, "live changes after the restart", func() bool { return len(out.changes()) > n+30 })
	stopChurn()

	// Every version written reaches the stream or lies inside the gap.
	last := map[string]string{}
	wg.mu.Lock()
	for k, rvs := range wg.written {
		last[k] = rvs[len(rvs)-1]
	}
	wg.mu.Unlock()
	testkit.Eventually(t, "the last version of every key", func() bool {
		cs := out.changes()
		for k, rv := range last {
			if !slices.Contains(versionsOf(cs, k), rv) {
				return false
			}
		}
		return true
	})
	cs := out.changes()
	var gaps []*informer.Gap
	for _, c := range cs {
		if c.Op == informer.OpGap {
			gaps = append(gaps, c.Gap)
		}
	}
	if len(gaps) > 1 {
		t.Fatalf("%d gap events, want at most 1: %s", len(gaps), ops())
	}
	g := &informer.Gap{Namespace: ns, From: "1", To: "1", Reason: informer.GapExpired}
	if len(gaps) == 0 {
		t.Logf("no gap: the watch went on from where it was")
	} else {
		g = gaps[0]
	}
	if g.Namespace != ns || g.Reason != informer.GapExpired || rvNumber(t, g.From) > rvNumber(t, g.To) {
		t.Fatalf("gap %+v, want (where the stream was, the relist] in %s, reason %s", *g, ns, informer.GapExpired)
	}
	from, to := rvNumber(t, g.From), rvNumber(t, g.To)
	delivered := map[string]bool{}
	for _, c := range cs {
		if c.Object != nil && !c.IsMarker() {
			delivered[c.Key+"@"+c.Object.GetResourceVersion()] = true
		}
	}
	missing, inGap := 0, 0
	var first string
	wg.mu.Lock()
	for k, rvs := range wg.written {
		for _, rv := range rvs {
			switch n := rvNumber(t, rv); {
			case delivered[k+"@"+rv]:
			case n > from && n <= to:
				inGap++
			default:
				missing++
				if first == "" {
					first = k + "@" + rv
				}
			}
		}
	}
	wg.mu.Unlock()
	t.Logf("%d changes written; gap (%s, %s]: %d versions inside it not delivered", wg.changes.Load(), g.From, g.To, inGap)
	if missing > 0 {
		t.Fatalf("%d versions outside the gap (%s, %s] never reached the stream, first %s", missing, g.From, g.To, first)
	}
}

// kubewire away across an API server restart, with etcd's history intact:
// the exact LIST at the checkpoint succeeds, and the new watch cache
// refuses the watch from it. The start must not list there again; it
// declares one gap and sends a snapshot.
func TestAResumeAcrossAnAPIServerRestartDeclaresOneGapThenASnapshot(t *testing.T) {
	ns := namespace(t)
	cp := checkpointOfAStoppedWatcher(t, ns)
	changed := setData(t, ns, "cm-1", "while down")
	if err := cluster.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	setData(t, ns, "cm-2", "after the restart")

	after := &holdingOutput{}
	w2 := watcherOf(t, ns, after)
	w2.SetResume(&informer.Resume{Streams: cp})
	runUntil(t, w2)
	var ops []string
	testkit.Within(t, 30*time.Second, "a gap, then a completed snapshot", func() bool {
		ops = ops[:0]
		for _, c := range after.changes() {
			ops = append(ops, string(c.Op))
		}
		return slices.Contains(ops, string(informer.OpSnapshotCompleted))
	}, func() string { return fmt.Sprint(ops) })
	// Between the gap and the snapshot come the differences the relist
	// found from the store the exact LIST had loaded: the two changes.
	cs := after.changes()
	if cs[0].Op != informer.OpGap || !slices.Equal(ops[1:4], []string{"updated", "updated", "started"}) {
		t.Fatalf("the stream begins %v, want a gap, the two changes made since the checkpoint, then a snapshot", ops)
	}
	if g := cs[0].Gap; g.From != cp[ns] || g.Reason != informer.GapExpired || rvNumber(t, g.To) < rvNumber(t, changed) {
		t.Fatalf("gap %+v, want (the checkpoint %s, a version at or after the change while down %s], reason %s", *g, cp[ns], changed, informer.GapExpired)
	}
	if n := strings.Count(strings.Join(ops, " "), string(informer.OpGap)); n != 1 {
		t.Fatalf("%d gap events, want 1: %v", n, ops)
	}
}
