package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks"
)

// newNamespace creates a namespace of its own for a test: the tests share
// one cluster, and each must watch and list only the ConfigMaps it wrote.
func newNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func startKfake(t *testing.T) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// jetStreamOf is a client of the server at url, for asking the consumer
// package what a stream holds while kubewire still runs.
func jetStreamOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return js
}

// connectSinks builds and connects the named sinks of the config at path
// as kubewire does, so that what a test writes through them is what
// kubewire would have written.
func connectSinks(t *testing.T, path string, names ...string) map[string]sinks.Sink {
	t.Helper()
	cfg, err := config.Load(path, app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	deps := sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	out := map[string]sinks.Sink{}
	for _, name := range names {
		sc, _ := cfg.Sink(name)
		s, err := app.DefaultRegistry().New(*sc, deps)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = s.Connect(ctx)
		cancel()
		if err != nil {
			t.Fatalf("connect %s: %v", name, err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		out[name] = s
	}
	return out
}

// startKubewire runs kubewire with yaml until the test ends, and returns
// once its first snapshot completed: writes before that are in the
// snapshot, not events of their own.
func startKubewire(t *testing.T, yaml string, rc *rest.Config) *apptest.Kubewire {
	t.Helper()
	k := apptest.Start(t, yaml, rc)
	k.WaitFor(t, "the first snapshot to complete", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > 0 })
	return k
}

// writeAroundSnapshots writes a and b, starts kubewire with yaml, and
// writes again in two rounds, after the initial snapshot and after the
// first periodic one (10s, the shortest interval allowed), so that the
// points fall just after snapshots and between them. It returns kubewire,
// still running, and the resourceVersion of the cluster after each write.
func writeAroundSnapshots(ctx context.Context, t *testing.T, cms typedcorev1.ConfigMapInterface, yaml string, rc *rest.Config) (*apptest.Kubewire, []string) {
	t.Helper()
	var points []string
	put := func(name, value string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
		got, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			got, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, got.ResourceVersion)
	}
	del := func(name string) {
		t.Helper()
		// The delete's own version is the list's after it.
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, l.ResourceVersion)
	}
	put("a", "1")
	put("b", "1")
	k := apptest.Start(t, yaml, rc)
	for round := range 2 {
		k.WaitFor(t, "a snapshot to complete", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > round })
		put("a", strconv.Itoa(round+2))
		put(fmt.Sprintf("c%d", round), "1")
		if round == 0 {
			del("b")
		}
		put("a", strconv.Itoa(round+10))
	}
	return k, points
}

// configMapState is how the API server's answers and history's are
// compared: by name, each ConfigMap's version and data.
func configMapState(cm corev1.ConfigMap) string {
	return cm.ResourceVersion + " " + cm.Data["v"]
}

// exactList is the oracle: what an exact LIST at rv returns is the true
// state at rv.
func exactList(ctx context.Context, t *testing.T, cms typedcorev1.ConfigMapInterface, rv string) map[string]string {
	t.Helper()
	l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range l.Items {
		out[cm.Name] = configMapState(cm)
	}
	return out
}

// heldState is the state a consumer view holds, comparable with exactList.
func heldState(objs []consumer.Object) map[string]string {
	held := map[string]string{}
	for _, o := range objs {
		var cm corev1.ConfigMap
		_ = json.Unmarshal(o.JSON, &cm)
		held[cm.Name] = configMapState(cm)
	}
	return held
}

// historyAt runs history --at at on the sink "events" of the config at
// path and returns the state it printed, comparable with exactList.
func historyAt(path, at string) (got map[string]string, code int, stderr string) {
	code, out, errOut := run("history", "--config", path, "--sink", "events", "--at", at, "-o", "json")
	got = map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var cm corev1.ConfigMap
		if l != "" && json.Unmarshal([]byte(l), &cm) == nil {
			got[cm.Name] = configMapState(cm)
		}
	}
	return got, code, errOut
}

// putAs writes the ConfigMap name as manager, and returns the write as
// the API server answered it.
func putAs(ctx context.Context, t *testing.T, cms typedcorev1.ConfigMapInterface, name, value, manager string) churnWrite {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
	got, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: manager})
	if apierrors.IsNotFound(err) {
		got, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: manager})
	}
	if err != nil {
		t.Fatal(err)
	}
	return churnWrite{name: name, value: value, manager: manager, rv: got.ResourceVersion, done: time.Now()}
}

// managerRun is a run of writes to web by one field manager.
type managerRun struct {
	manager string
	writes  int
}

// churnInRuns writes web in the runs of plan, each write followed by one
// to another object, whose versions are in web's ranges but are not web's.
// A mark ends each run tol after its last answer: after kubewire observed
// each write of the run (tol covers the observing lag), and before the
// next run, sent once the clock has passed it. It returns every write, of
// every object, the marks (marks[i] ends run i) and web's writes by run.
func churnInRuns(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, tol time.Duration, plan []managerRun) (log []churnWrite, marks []time.Time, runs [][]churnWrite) {
	t.Helper()
	cms := cs.CoreV1().ConfigMaps(ns)
	n := 0
	for _, run := range plan {
		if len(log) > 0 {
			// The API server stamps a managedFields entry to the second,
			// and changedby is the newest entry: a tie with the previous
			// manager's write in the same second is a guess
			// (docs/events.md). So a new manager waits for the clock to
			// pass that second: a wait on the clock the assertion depends
			// on, not on another goroutine.
			prev := webSecond(ctx, t, cs, ns)
			mark := log[len(log)-1].done.Add(tol)
			marks = append(marks, mark)
			testkit.Within(t, 5*time.Second, "the clock to pass the mark and the next second", func() bool {
				now := time.Now()
				return now.After(mark) && now.Truncate(time.Second).After(prev)
			})
		}
		var ofRun []churnWrite
		for range run.writes {
			n++
			log = append(log, putAs(ctx, t, cms, "web", strconv.Itoa(n), run.manager))
			ofRun = append(ofRun, log[len(log)-1])
			log = append(log, putAs(ctx, t, cms, "other", strconv.Itoa(n), "writer-z"))
		}
		runs = append(runs, ofRun)
	}
	return log, marks, runs
}

// observingLag is the longest time from the API server's answer to a
// write of log to kubewire observing it: what a tolerance on times must
// cover.
func observingLag(t *testing.T, k *apptest.Kubewire, log []churnWrite) time.Duration {
	t.Helper()
	var lag time.Duration
	seen := map[string]time.Time{}
	for _, ev := range k.Events(t) {
		seen[apptest.Ext(ev, "resourceversion")] = ev.Time()
	}
	for _, w := range log {
		if o, ok := seen[w.rv]; ok {
			lag = max(lag, o.Sub(w.done))
		}
	}
	t.Logf("the longest lag from a write's answer to kubewire observing it: %s", lag)
	return lag
}
