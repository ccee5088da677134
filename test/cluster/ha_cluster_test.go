//go:build cluster

package nodecluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/nodecluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// published is the sum of the pod's kubewire_events_published_total, read
// from its metrics port over the bridge; -1 if it did not answer.
func published(p corev1.Pod) float64 {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:9090/metrics", p.Status.PodIP))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kubewire_events_published_total{") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// leaderPod is the name of the pod holding the release's leader Lease, or
// "" (the holder identity is <hostname>_<uuid>, and a pod's hostname is its
// name).
func leaderPod(t *testing.T, c *nodecluster.Cluster, ns, lease string) string {
	l, err := c.Client.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return name
}

// counter writes a ConfigMap's data n = 1, 2, ... every interval until
// stopped, and remembers the resourceVersion each write returned.
type counter struct {
	c      *nodecluster.Cluster
	ns     string
	mu     sync.Mutex
	rvs    []string // rvs[n-1] is the version with data n
	stop   chan struct{}
	done   chan struct{}
	errors int
}

func startCounter(t *testing.T, c *nodecluster.Cluster, ns, name string, interval time.Duration) *counter {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"n": "0"}}
	cm, err := c.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &counter{c: c, ns: ns, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 1; ; {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			cm.Data["n"] = strconv.Itoa(n)
			updated, err := c.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			if err != nil {
				w.mu.Lock()
				w.errors++
				w.mu.Unlock()
				continue
			}
			cm = updated
			w.mu.Lock()
			w.rvs = append(w.rvs, updated.ResourceVersion)
			w.mu.Unlock()
			n++
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *counter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// written is the number of writes so far.
func (w *counter) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rvs)
}

func (w *counter) versions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.rvs...)
}

// seen collects, from a View's handlers, every value of the counter
// ConfigMap's n that the View applied, and the watch gaps kubewire declared.
type seen struct {
	mu   sync.Mutex
	ns   map[int]bool
	gaps []consumer.WatchGap
}

func (s *seen) record(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	n, err := strconv.Atoi(data["n"])
	if err != nil {
		return
	}
	s.mu.Lock()
	s.ns[n] = true
	s.mu.Unlock()
}

func (s *seen) has(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns[n]
}

// counterView reads the counter ConfigMap ns/name from Kafka.
func counterView(t *testing.T, b hostBrokers, ns, name string) *seen {
	t.Helper()
	s := &seen{ns: map[int]bool{}}
	v := consumer.NewView(consumer.Options{
		Resource: "configmaps",
		OnWatchGap: func(g consumer.WatchGap) {
			s.mu.Lock()
			s.gaps = append(s.gaps, g)
			s.mu.Unlock()
		},
	})
	mine := func(obj any) bool {
		u, ok := obj.(*unstructured.Unstructured)
		return ok && u.GetNamespace() == ns && u.GetName() == name
	}
	v.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: mine,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.record(obj) },
			UpdateFunc: func(_, obj any) { s.record(obj) },
		},
	})
	ks, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: []string{b.kafka.Addr}, Topic: "k8s.core.configmaps", OnError: func(error, time.Duration) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ks.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// missing reports the counter's versions the consumer never saw, and how
// many of them lie inside a gap kubewire declared (a watch.gap event whose
// range (from, to] holds the version).
func missing(w *counter, s *seen) (total, declared int, first []int) {
	rvs := w.versions()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, rv := range rvs {
		n := i + 1
		if s.ns[n] {
			continue
		}
		total++
		if len(first) < 10 {
			first = append(first, n)
		}
		v, _ := strconv.ParseUint(rv, 10, 64)
		for _, g := range s.gaps {
			from, _ := strconv.ParseUint(g.From, 10, 64)
			to, _ := strconv.ParseUint(g.To, 10, 64)
			if v > from && v <= to {
				declared++
				break
			}
		}
	}
	return total, declared, first
}

func upgrade(t *testing.T, cfg *action.Configuration, ns, name string, values map[string]any) time.Duration {
	t.Helper()
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = ns, true, 5*time.Minute
	start := time.Now()
	if _, err := up.Run(name, nodecluster.ChartPackage(t), values); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	return time.Since(start)
}

func TestClusterTwoReplicasElectOnePublisherHandOverWhenItsPodIsDeletedAndRollOnAnUpgrade(t *testing.T) {
	c := nodecluster.Start(t)
	b := startHostBrokers(t)
	ctx := context.Background()
	const ns, name = "kubewire", "kubewire"
	kafkaSecret(t, c, ns, b)
	values := merge(exampleWithHostBrokers(t, b), c.ImageValues())
	values["replicaCount"] = 2
	cfg := c.Helm(t, ns)
	_, took := install(t, c, cfg, ns, name, values)
	t.Logf("helm install --wait of 2 replicas returned after %s", took.Round(100*time.Millisecond))

	var leader string
	testkit.Within(t, time.Minute, "a leader among the release's pods", func() bool {
		leader = leaderPod(t, c, ns, name)
		return leader != ""
	})
	w := startCounter(t, c, "default", "counter", 50*time.Millisecond)
	s := counterView(t, b, "default", "counter")
	testkit.Within(t, time.Minute, "the counter's first values in Kafka", func() bool { return w.written() > 5 && s.has(5) })

	t.Run("only the leader publishes", func(t *testing.T) {
		for _, p := range kubewirePods(t, c, ns, name) {
			n := published(p)
			t.Logf("pod %s (leader: %v) published %v events", p.Name, p.Name == leader, n)
			if p.Name == leader && n <= 0 || p.Name != leader && n != 0 {
				t.Errorf("pod %s (leader %s) published %v events", p.Name, leader, n)
			}
		}
	})

	t.Run("deleting the leader's pod hands over to the other", func(t *testing.T) {
		deleted := time.Now()
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var next string
		testkit.Within(t, 2*time.Minute, "another pod holding the Lease", func() bool {
			next = leaderPod(t, c, ns, name)
			return next != "" && next != leader
		})
		takeover := time.Since(deleted)
		after := w.written() + 1
		testkit.Within(t, 2*time.Minute, "a value written after the takeover in Kafka", func() bool { return s.has(after) })
		t.Logf("takeover: %s from the delete until %s held the Lease; %s until a change written after it was in Kafka",
			takeover.Round(10*time.Millisecond), next, time.Since(deleted).Round(10*time.Millisecond))
		leader = next
	})

	t.Run("the PodDisruptionBudget refuses to evict the second of two pods", func(t *testing.T) {
		testkit.Within(t, 2*time.Minute, "two Ready pods and one disruption allowed", func() bool {
			pods := kubewirePods(t, c, ns, name)
			pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(pods) == 2 && ready(pods[0]) && ready(pods[1]) && pdb.Status.DisruptionsAllowed == 1
		})
		pods := kubewirePods(t, c, ns, name)
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		evict := func(p corev1.Pod) error {
			return c.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
		}
		if err := evict(pods[0]); err != nil {
			t.Fatalf("evicting the first pod: %v", err)
		}
		err := evict(pods[1])
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("evicting the second pod: got %v, want 429 Too Many Requests from the PodDisruptionBudget", err)
		}
		t.Logf("second eviction refused: %v", err)
	})

	t.Run("helm upgrade with a changed config rolls the pods and the consumer converges", func(t *testing.T) {
		testkit.Within(t, 2*time.Minute, "two Ready pods", func() bool {
			pods := kubewirePods(t, c, ns, name)
			return len(pods) == 2 && ready(pods[0]) && ready(pods[1])
		})
		before := map[string]bool{}
		for _, p := range kubewirePods(t, c, ns, name) {
			before[p.Name] = true
		}
		values["config"].(map[string]any)["dispatch"] = map[string]any{"batchSize": 50}
		rollout := upgrade(t, cfg, ns, name, values)
		// Helm's wait counts the new ReplicaSet's ready pods; the last old
		// one may not have been told to go yet.
		var stale []string
		testkit.Within(t, 2*time.Minute, "every pod replaced by the upgrade", func() bool {
			stale = stale[:0]
			for _, p := range kubewirePods(t, c, ns, name) {
				if before[p.Name] {
					stale = append(stale, p.Name)
				}
			}
			return len(stale) == 0
		}, func() string { return fmt.Sprint("not replaced: ", stale) })
		// A last value written after the rollout, then the consumer has to
		// reach it.
		after := w.written() + 1
		testkit.Within(t, 2*time.Minute, "a value written after the rollout in Kafka", func() bool { return s.has(after) })
		w.halt()
		last := w.written()
		testkit.Within(t, 2*time.Minute, "the last value in Kafka", func() bool { return s.has(last) })
		total, declared, first := missing(w, s)
		t.Logf("rollout of 2 replicas: %s; the counter wrote %d versions (%d failed writes) across the handover, eviction and rollout; the consumer missed %d, %d of them inside a declared gap (first missing: %v); gaps: %d",
			rollout.Round(100*time.Millisecond), last, w.errors, total, declared, first, len(s.gaps))
		if total != declared {
			t.Errorf("%d versions missing outside a declared gap: %v", total-declared, first)
		}
	})
}
