package faults_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// configMapWatchers sums the open ConfigMap watches, read from the
// apiserver's /metrics: apiserver_longrunning_requests{verb="WATCH",
// resource="configmaps"}, a stable metric. The issue names
// apiserver_registered_watchers, which Kubernetes removed (1.36 has no such
// series); it is summed too, should an apiserver still serve it.
func configMapWatchers(t *testing.T) int {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	sum, found := 0, false
	for _, line := range strings.Split(string(raw), "\n") {
		watch := strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`) &&
			strings.Contains(line, `resource="configmaps"`)
		registered := strings.HasPrefix(line, "apiserver_registered_watchers{") && strings.Contains(line, `kind="ConfigMap"`)
		if !watch && !registered {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += int(n)
		found = true
	}
	if !found {
		t.Fatal("/metrics has no series of ConfigMap watches")
	}
	return sum
}

func TestTwentyInformersFedByJetStreamAddNoWatchOnTheAPIServer(t *testing.T) {
	ns := namespace(t)
	_, natsURL := startBrokers(t)
	yaml := brokerConfig(ns, "unused:9092", natsURL, "", "")
	yaml = strings.Replace(yaml, "sinks: [kafka, js]}", "sinks: [js]}", 1)
	yaml = yaml[:strings.Index(yaml, "  - name: kafka\n")] + yaml[strings.Index(yaml, "  - name: js\n"):]
	cms := kube.CoreV1().ConfigMaps(ns)
	for i := range 10 {
		if _, err := cms.Create(context.Background(), configMapNamed("cm-"+strconv.Itoa(i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// kubewire's watch and the truth informer's start after their lists,
	// so after they report synced: wait until each shows in the count, or
	// the count taken below would lack it and never come back to itself.
	watching := func(what string, start func()) {
		c0 := configMapWatchers(t)
		start()
		testkit.Within(t, 15*time.Second, what+"'s watch to show on the apiserver", func() bool {
			return configMapWatchers(t) > c0
		})
	}
	watching("kubewire", func() { apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser)) })
	var truth cache.SharedIndexInformer
	watching("the truth informer", func() { truth = apiServerInformer(t, ns) })
	want := strings.Join(identities(truth.GetStore()), "\n")

	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "KW_" + strings.ToUpper(strings.ReplaceAll(ns, "-", "_"))
	waitUntil(t, "kubewire's stream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		return err == nil && s.CachedInfo().State.Msgs > 0
	}, nil)

	before := configMapWatchers(t)
	const n = 20
	for range n {
		v := runView(t, func(v *consumer.View) (func(context.Context) error, error) {
			s, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: stream})
			if err != nil {
				return nil, err
			}
			return s.Run, nil
		})
		inf := informerOn(t, consumer.NewSharedIndexInformer(v, "configmaps", 0, nil))
		waitUntil(t, "a broker-fed informer to hold the apiserver's objects", func() bool {
			return strings.Join(identities(inf.GetStore()), "\n") == want
		}, nil)
	}
	// The count is of the whole apiserver: kubewire's and the truth
	// informer's own watches are in it, and one of them being replaced (a
	// watch that timed out, a relist) counts twice for a moment. The 20
	// informers run until the test ends, so a watch of theirs would stay:
	// the count must come back to what it was, and stay there.
	after := configMapWatchers(t)
	testkit.Within(t, 15*time.Second, "the apiserver's ConfigMap watches to be what they were before the informers", func() bool {
		after = configMapWatchers(t)
		return after <= before
	}, func() string {
		return fmt.Sprintf("%d broker-fed informers added %d watches on the apiserver, want 0", n, after-before)
	})
	t.Logf("open ConfigMap watches on the apiserver: %d before, %d with %d broker-fed informers", before, after, n)
	// The metric must be able to see a watch: one informer on the
	// apiserver itself adds one.
	apiServerInformer(t, ns)
	waitUntil(t, "an apiserver informer's watch to show in the metric", func() bool { return configMapWatchers(t) > after }, nil)
	record("fan-out: 20 JetStream-fed informers, apiserver watches added", 0, n, 0, after-before)
}
