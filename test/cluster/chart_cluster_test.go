//go:build cluster

package nodecluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/nodecluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// The example values file the chart is installed with, as docs/quickstart.md
// shows it: Kafka over TLS with SCRAM-SHA-512, its CA and password from a
// Secret mounted with secretMounts.
const exampleValues = "examples/helm/kafka-strimzi-sasl-tls.yaml"

const (
	kafkaUser     = "kubewire"
	kafkaPassword = "kubewire-e2e-secret"
	spoolDir      = "/var/lib/kubewire/spool"
)

// hostBrokers are a real Apache Kafka (TLS and SCRAM, as the example
// expects) and a nats-server with JetStream, running on the host and
// listening on the bridge's gateway address, where the pods reach them.
type hostBrokers struct {
	kafka *kafkatest.Broker
	nats  *natstest.Server
}

func startHostBrokers(t *testing.T) hostBrokers {
	t.Helper()
	return hostBrokers{
		kafka: kafkatest.StartWith(t, kafkatest.Options{Host: nodecluster.GatewayIP, SASL: true, Users: map[string]string{kafkaUser: kafkaPassword}}),
		nats:  natstest.StartOn(t, nodecluster.GatewayIP),
	}
}

// exampleWithHostBrokers reads exampleValues and points it at the host's
// brokers: the Kafka sink's brokers become the host broker's SASL_SSL
// listener, and a JetStream sink is added next to it for every resource.
// Everything else (TLS, SCRAM, the Secret mount, the resources) is the
// example's.
func exampleWithHostBrokers(t *testing.T, b hostBrokers) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", exampleValues))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	cfg := values["config"].(map[string]any)
	sinks := cfg["sinks"].([]any)
	kafkaSink := sinks[0].(map[string]any)["kafka"].(map[string]any)
	kafkaSink["brokers"] = []any{b.kafka.SASLSSLAddr}
	cfg["sinks"] = append(sinks, map[string]any{
		"name": "jetstream",
		"type": "nats",
		"nats": map[string]any{
			"servers":   []any{b.nats.URL()},
			"jetstream": map[string]any{"stream": map[string]any{"name": "KUBEWIRE"}},
		},
	})
	for _, r := range cfg["resources"].([]any) {
		r := r.(map[string]any)
		r["sinks"] = append(r["sinks"].([]any), "jetstream")
	}
	return values
}

// merge copies src over dst, recursively for maps.
func merge(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if m, ok := v.(map[string]any); ok {
			if d, ok := dst[k].(map[string]any); ok {
				dst[k] = merge(d, m)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// kafkaSecret is the Secret the example mounts: the broker's CA and the
// SCRAM password.
func kafkaSecret(t *testing.T, c *nodecluster.Cluster, ns string, b hostBrokers) {
	t.Helper()
	ca, err := os.ReadFile(b.kafka.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kubewire-kafka", Namespace: ns},
		Data:       map[string][]byte{"ca.crt": ca, "password": []byte(kafkaPassword)},
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func install(t *testing.T, c *nodecluster.Cluster, cfg *action.Configuration, ns, name string, values map[string]any) (*release.Release, time.Duration) {
	t.Helper()
	in := action.NewInstall(cfg)
	in.Namespace, in.ReleaseName = ns, name
	in.Wait, in.Timeout = true, 3*time.Minute
	start := time.Now()
	rel, err := in.Run(nodecluster.ChartPackage(t), values)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	return rel, time.Since(start)
}

// kubewirePods lists the release's kubewire pods (not the test pod).
func kubewirePods(t *testing.T, c *nodecluster.Cluster, ns, release string) []corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/name=kubewire",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && !strings.Contains(p.Name, "-test-") {
			out = append(out, p)
		}
	}
	return out
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyz is the status code of the pod's /readyz, asked from the host over
// the bridge; 0 if it did not answer.
func readyz(p corev1.Pod) int {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:9090/readyz", p.Status.PodIP))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// views reads what kubewire wrote for configmaps from Kafka (through the
// broker's PLAINTEXT listener) and from JetStream into two consumer Views.
type views struct{ kafka, jetstream *consumer.View }

func readViews(t *testing.T, b hostBrokers) views {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	quiet := func(error, time.Duration) {} // the topic and stream appear once kubewire creates them
	v := views{kafka: consumer.NewView(consumer.Options{Resource: "configmaps"}), jetstream: consumer.NewView(consumer.Options{Resource: "configmaps"})}
	ks, err := consumer.NewKafkaSource(v.kafka, consumer.KafkaConfig{Brokers: []string{b.kafka.Addr}, Topic: "k8s.core.configmaps", OnError: quiet})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.nats.URL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	jss, err := consumer.NewJetStreamSource(v.jetstream, consumer.JetStreamConfig{JetStream: js, Stream: "KUBEWIRE", OnError: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { ks.Run(ctx); done <- struct{}{} }()
	go func() { jss.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return v
}

// holds reports whether v holds the ConfigMap ns/name with data key=value.
func holds(v *consumer.View, ns, name, key, value string) bool {
	for _, o := range v.Objects("configmaps") {
		u, err := o.Decode()
		if err != nil || u.GetNamespace() != ns || u.GetName() != name {
			continue
		}
		data, _ := u.Object["data"].(map[string]any)
		return data[key] == value
	}
	return false
}

func TestClusterTheChartFromTheReleasePackageRunsKubewireAsARestrictedPodThatStreamsToKafkaAndJetStream(t *testing.T) {
	c := nodecluster.Start(t)
	b := startHostBrokers(t)
	ctx := context.Background()
	const ns, name = "kubewire", "kubewire"
	kafkaSecret(t, c, ns, b)
	values := merge(exampleWithHostBrokers(t, b), c.ImageValues())
	cfg := c.Helm(t, ns)
	_, took := install(t, c, cfg, ns, name, values)
	pods := kubewirePods(t, c, ns, name)
	if len(pods) != 1 || !ready(pods[0]) {
		t.Fatalf("want one Ready kubewire pod after helm install --wait, got %d", len(pods))
	}
	pod := pods[0]
	t.Logf("helm install --wait returned after %s with pod %s Ready", took.Round(100*time.Millisecond), pod.Name)

	t.Run("events of a ConfigMap reach Kafka and JetStream", func(t *testing.T) {
		v := readViews(t, b)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}, Data: map[string]string{"step": "1"}}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Within(t, time.Minute, "the ConfigMap in the view read from Kafka", func() bool { return holds(v.kafka, "default", "probe", "step", "1") })
		testkit.Within(t, time.Minute, "the ConfigMap in the view read from JetStream", func() bool { return holds(v.jetstream, "default", "probe", "step", "1") })
	})

	t.Run("the container runs as non-root with a read-only root and the spool as its one writable directory", func(t *testing.T) {
		out, stderr, err := c.Exec(ctx, ns, pod.Name, "kubewire", "/inside", spoolDir, "/", "/tmp", "/etc/kubewire", "/var/lib/kubewire")
		if err != nil {
			t.Fatalf("exec /inside: %v\n%s", err, stderr)
		}
		var r struct {
			UID, GID int
			Writable []string
			Checked  []string
			ReadOnly []string
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		t.Logf("inside the container: uid %d gid %d; writable %v of %v; mounted read-only %v", r.UID, r.GID, r.Writable, r.Checked, r.ReadOnly)
		// Not writable by a non-root user is not enough: the root
		// filesystem itself must be mounted read-only.
		if !slices.Contains(r.ReadOnly, "/") {
			t.Errorf("the root filesystem is not mounted read-only (read-only mounts: %v)", r.ReadOnly)
		}
		if r.UID != 65532 || r.GID != 65532 {
			t.Errorf("runs as %d:%d, want 65532:65532", r.UID, r.GID)
		}
		// Besides the spool, only the IPC filesystems the runtime mounts in
		// every container, world-writable, whatever the securityContext:
		// /dev/shm (a tmpfs, counted against the pod's memory) and
		// /dev/mqueue (POSIX message queues). No pod spec field removes
		// them, and neither is on disk.
		want := []string{"/dev/mqueue", "/dev/shm", spoolDir}
		if !slices.Equal(r.Writable, want) {
			t.Errorf("writable directories %v, want %v", r.Writable, want)
		}
		for _, d := range []string{"/", "/etc/kubewire", spoolDir} {
			if !slices.Contains(r.Checked, d) {
				t.Errorf("%s was not checked: %v", d, r.Checked)
			}
		}
	})

	t.Run("helm test passes", func(t *testing.T) {
		rt := action.NewReleaseTesting(cfg)
		rt.Namespace, rt.Timeout = ns, 2*time.Minute
		start := time.Now()
		rel, err := rt.Run(name)
		if err != nil {
			t.Fatalf("helm test: %v", err)
		}
		for _, h := range rel.Hooks {
			if h.LastRun.Phase != release.HookPhaseSucceeded {
				t.Errorf("test hook %s: %s", h.Name, h.LastRun.Phase)
			}
		}
		t.Logf("helm test passed in %s", time.Since(start).Round(100*time.Millisecond))
	})

	t.Run("readyz answers 503 while Kafka is down and 200 once it is back", func(t *testing.T) {
		current := func() corev1.Pod {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return *p
		}
		if code := readyz(current()); code != http.StatusOK {
			t.Fatalf("/readyz %d before the broker stopped", code)
		}
		b.kafka.Stop(t)
		stopped := time.Now()
		// A change to publish, so the sink meets the broker's absence.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during-outage", Namespace: "default"}, Data: map[string]string{"step": "1"}}
		if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Within(t, 2*time.Minute, "/readyz 503 and the pod not Ready", func() bool {
			p := current()
			return readyz(p) == http.StatusServiceUnavailable && !ready(p)
		})
		t.Logf("/readyz 503 and pod not Ready %s after the broker stopped", time.Since(stopped).Round(100*time.Millisecond))
		b.kafka.Start(t)
		started := time.Now()
		testkit.Within(t, 2*time.Minute, "/readyz 200 and the pod Ready", func() bool {
			p := current()
			return readyz(p) == http.StatusOK && ready(p)
		})
		t.Logf("/readyz 200 and pod Ready %s after the broker started", time.Since(started).Round(100*time.Millisecond))
	})
}
