package faults_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// brokerUnderTest is what the "same objects" proof needs of a broker.
type brokerUnderTest struct {
	name string
	// sink is the sinks: entry routing the namespace's ConfigMaps to it.
	sink string
	// delivered counts what kubewire has written to it so far.
	delivered func() int
	kill      func()
	restart   func()
	// views are the consumer Views read from it, each with its source
	// running, by what they read. They start after the faults.
	views func(t *testing.T) map[string]*consumer.View
	// liveViews, if set, are Views started before the faults whose sources
	// keep running through them: a consumer that never restarts must
	// converge too.
	liveViews func(t *testing.T) map[string]*consumer.View
}

// informerOn runs an informer until the test ends and waits for its sync.
func informerOn(t *testing.T, inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "an informer to sync", inf.HasSynced, nil)
	return inf
}

// waitUntil polls cond until it holds, failing with detail after 90 s.
func waitUntil(t *testing.T, what string, cond func() bool, detail func() string) {
	t.Helper()
	if detail == nil {
		testkit.Within(t, 90*time.Second, what, cond)
		return
	}
	testkit.Within(t, 90*time.Second, what, cond, detail)
}

// identities lists a store's objects as "name uid rv", sorted.
func identities(s cache.Store) []string {
	out := []string{}
	for _, o := range s.List() {
		m, err := meta.Accessor(o)
		if err != nil {
			out = append(out, fmt.Sprintf("%T: %v", o, err))
			continue
		}
		out = append(out, m.GetName()+" "+string(m.GetUID())+" "+m.GetResourceVersion())
	}
	sort.Strings(out)
	return out
}

func apiServerInformer(t *testing.T, ns string) cache.SharedIndexInformer {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	return informerOn(t, f.Core().V1().ConfigMaps().Informer())
}

// proxyKubeconfig writes a kubeconfig that reaches the apiserver through
// proxy, so that a kubewire process can be cut off from it.
func proxyKubeconfig(t *testing.T, path string, proxy *testcluster.Proxy) {
	t.Helper()
	if err := cluster.WriteKubeconfig(path, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = proxy.RESTConfig(cluster, testcluster.AdminUser).Host
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// sameObjectsConfig routes ns's ConfigMaps to the broker's sink only, with
// a spool of the test's own (the default directory is shared by every run
// on the machine).
func sameObjectsConfig(ns, spoolDir string, b brokerUnderTest) string {
	return fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: faults
dispatch: {drainTimeout: 10s, spoolDir: %q}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [%s]}
sinks:
%s`, spoolDir, ns, b.name, b.sink)
}

// proveSameObjects churns ConfigMaps while it kills and restarts the
// broker, SIGKILLs kubewire and deletes objects while it is down, restarts
// it, and forces a relist (a cut watch whose history was compacted); then
// every informer built on the broker must hold exactly the objects, by uid
// and resourceVersion, that an informer on the apiserver holds.
func proveSameObjects(t *testing.T, ns string, b brokerUnderTest, label string) {
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(ns)
	proxy, err := cluster.NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	k := newProcs(t, ns)
	proxyKubeconfig(t, k.kubeconfig, proxy)
	if err := os.WriteFile(k.config, []byte(sameObjectsConfig(ns, t.TempDir(), b)), 0o600); err != nil {
		t.Fatal(err)
	}
	first, _ := k.start(t, "first.jsonl")
	stop := make(chan struct{})
	wg := churn(ns, stop)
	waitUntil(t, "kubewire to write to "+b.name, func() bool { return b.delivered() > 40 }, nil)
	var live map[string]*consumer.View
	if b.liveViews != nil {
		live = b.liveViews(t)
		for what, v := range live {
			waitUntil(t, "the view on "+what+" to catch up before the faults", v.HasSynced, nil)
		}
	}

	// The broker dies and comes back while the churn goes on.
	b.kill()
	before := wg.changes.Load()
	waitUntil(t, "churn while the broker is down", func() bool { return wg.changes.Load() > before+30 }, nil)
	b.restart()
	n := b.delivered()
	waitUntil(t, "kubewire to write again after the broker returned", func() bool { return b.delivered() > n+20 }, nil)

	// kubewire is SIGKILLed; objects are deleted, and one created, while
	// it is down.
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	close(stop)
	wg.Wait()
	changes := wg.changes.Load()
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, cm := range l.Items {
		if deleted == 3 {
			break
		}
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("found nothing to delete while kubewire was down")
	}
	if _, err := cms.Create(ctx, configMapNamed("born-while-down"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	changes += int64(deleted) + 1
	n = b.delivered()
	second, _ := k.start(t, "second.jsonl")
	waitUntil(t, "the restarted kubewire's snapshot", func() bool { return b.delivered() > n }, nil)
	// The relist below must meet an informer that has listed already:
	// cut before that, the deletes would only be missing from its initial
	// list, and no relist would happen.
	stderr := second.Stderr.(*testkit.Buffer)
	waitUntil(t, "the restarted kubewire's informer to sync", func() bool { return strings.Contains(stderr.String(), "informer synced") }, nil)

	// A forced relist: the watch is cut, the cluster changes, and the
	// history it would resume from is compacted.
	proxy.Cut()
	l, err = cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) < 3 {
		t.Fatalf("only %d ConfigMaps left for the relist fault", len(l.Items))
	}
	for _, cm := range l.Items[:2] {
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := l.Items[2]
	cm.Data = map[string]string{"changed": "while cut off"}
	if _, err := cms.Update(ctx, &cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new-while-cut"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	changes += 4
	if _, err := cluster.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.ForgetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()

	truth := apiServerInformer(t, ns)
	views := b.views(t)
	for what, v := range live {
		views[what] = v
	}
	for what, v := range views {
		inf := informerOn(t, consumer.NewSharedIndexInformer(v, "configmaps", 0, nil))
		var got, want []string
		waitUntil(t, "the informer on "+what+" to hold the apiserver's objects", func() bool {
			got, want = identities(inf.GetStore()), identities(truth.GetStore())
			return strings.Join(got, "\n") == strings.Join(want, "\n")
		}, func() string { return diffLists(got, want) })
		st := v.Stats()
		t.Logf("%s: %d objects; view stats %+v", what, len(want), st)
		if what != "JetStream KV" && st.FinalStateUnknown == 0 {
			t.Errorf("%s: no delete marked finalstateunknown: the forced relist did not happen", what)
		}
		record(fmt.Sprintf("same objects after 3 faults (%s informer, %s)", what, label),
			changes, int(st.Applied+st.Duplicates+st.Stale+st.Tombstones), int(st.Duplicates), 0)
	}
}

// diffLists says what got lacks and has beyond want.
func diffLists(got, want []string) string {
	g, w := map[string]bool{}, map[string]bool{}
	for _, s := range got {
		g[s] = true
	}
	for _, s := range want {
		w[s] = true
	}
	var out []string
	for _, s := range want {
		if !g[s] {
			out = append(out, "missing "+s)
		}
	}
	for _, s := range got {
		if !w[s] {
			out = append(out, "extra "+s)
		}
	}
	return strings.Join(out, "; ")
}

// runView binds a new View to a source made by bind and runs the source
// until the test ends.
func runView(t *testing.T, bind func(*consumer.View) (func(context.Context) error, error)) *consumer.View {
	t.Helper()
	v := consumer.NewView(consumer.Options{Resource: "configmaps"})
	run, err := bind(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx)
		if err != nil && ctx.Err() == nil {
			t.Logf("source ended early: %v", err)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("source: %v", err)
		}
	})
	return v
}

// jetStreamUnderTest is a nats-server process with a stream and a
// key-value bucket that kubewire's NATS sink keeps.
func jetStreamUnderTest(t *testing.T, ns string) brokerUnderTest {
	srv := natstest.Start(t)
	suffix := strings.ToUpper(strings.ReplaceAll(ns, "-", "_"))
	stream, bucket := "KW_"+suffix, "OBJECTS_"+suffix
	nc, err := natsgo.Connect(srv.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return brokerUnderTest{
		name: "js",
		sink: fmt.Sprintf(`  - name: js
    type: nats
    nats:
      servers: [%q]
      subject: "kw.%s.{namespace}.{name}"
      reconnectWait: 100ms
      jetstream: {stream: {name: %s}, kv: {bucket: %s, create: true}}
`, srv.URL(), ns, stream, bucket),
		delivered: func() int {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return 0
			}
			return int(s.CachedInfo().State.LastSeq)
		},
		kill:    srv.Kill,
		restart: srv.Begin,
		liveViews: func(t *testing.T) map[string]*consumer.View {
			return map[string]*consumer.View{
				"JetStream, durable, through the faults": runView(t, func(v *consumer.View) (func(context.Context) error, error) {
					s, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: stream, Durable: "live"})
					if err != nil {
						return nil, err
					}
					return s.Run, nil
				}),
			}
		},
		views: func(t *testing.T) map[string]*consumer.View {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatal(err)
			}
			return map[string]*consumer.View{
				"JetStream": runView(t, func(v *consumer.View) (func(context.Context) error, error) {
					s, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: stream})
					if err != nil {
						return nil, err
					}
					return s.Run, nil
				}),
				"JetStream KV": runView(t, func(v *consumer.View) (func(context.Context) error, error) {
					s, err := consumer.NewKVSource(v, consumer.KVConfig{KeyValue: kv})
					if err != nil {
						return nil, err
					}
					return s.Run, nil
				}),
			}
		},
	}
}

func TestInformersOnJetStreamAndItsKeyValueBucketHoldTheAPIServersObjectsAfterBrokerKillKubewireKillAndRelist(t *testing.T) {
	ns := namespace(t)
	proveSameObjects(t, ns, jetStreamUnderTest(t, ns), "nats-server process")
}
