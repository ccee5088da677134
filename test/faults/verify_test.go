package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

// brokers starts an in-process Kafka (kfake) and NATS server with JetStream
// and returns a config routing ns's ConfigMaps to both.
func brokers(t *testing.T, ns string) string {
	t.Helper()
	kafkaAddr, natsURL := startBrokers(t)
	return brokerConfig(ns, kafkaAddr, natsURL, "", "")
}

// withStdout is brokerConfig's extra sink for tests that also read stdout.
const withStdout = "  - name: out\n    type: stdout\n"

// startBrokers starts kfake and an embedded nats-server with JetStream for
// the test and returns their addresses.
func startBrokers(t *testing.T) (kafkaAddr, natsURL string) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	srv := natstest.Embedded(t)
	return kc.ListenAddrs()[0], srv.ClientURL()
}

// verifyBrokers requires both broker sinks to converge with no order
// violation, and records a row per sink.
func verifyBrokers(t *testing.T, yaml, fault string, changes int64) {
	t.Helper()
	verifyBrokersOn(t, yaml, fault, changes, "kfake/embedded")
}

// verifyBrokersOn is verifyBrokers on the brokers its label names.
func verifyBrokersOn(t *testing.T, yaml, fault string, changes int64, brokers string) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		rep := verifyUntilConverged(t, cfg, sink)
		if len(rep.OrderViolations) != 0 {
			t.Fatalf("%s: order violations %v", sink, rep.OrderViolations)
		}
		record(fault+" ("+sink+", "+brokers+")", changes, rep.Events, rep.Duplicates, 0)
	}
}

func verifyUntilConverged(t *testing.T, cfg *config.Config, sink string, also ...func(*verify.Report) bool) *verify.Report {
	t.Helper()
	var rep *verify.Report
	var lastErr error
	deadline := time.Now().Add(90 * time.Second)
	for {
		r, err := verify.Run(context.Background(), verify.Options{Config: cfg, Sink: sink, REST: cluster.RESTConfig(testcluster.AdminUser)})
		if err == nil {
			rep = r
			ok := !r.Diverged()
			for _, cond := range also {
				ok = ok && cond(r)
			}
			if ok {
				return rep
			}
		}
		lastErr = err
		if time.Now().After(deadline) {
			var out bytes.Buffer
			if rep != nil {
				rep.Print(&out)
			}
			t.Fatalf("sink %s did not converge within 90s (last error %v); last report:\n%s", sink, lastErr, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestVerifyFindsKafkaAndJetStreamConvergedAfterChurnAndReportsDivergenceOtherwise(t *testing.T) {
	ns := namespace(t)
	yaml := brokers(t, ns)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	stop := make(chan struct{})
	wg := churn(ns, stop)
	testkit.Eventually(t, "some churn", func() bool {
		l, err := kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(l.Items) >= 15
	})
	close(stop)
	wg.Wait()
	// One delete for certain, so Kafka must carry a tombstone.
	cms := kube.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(context.Background(), configMapNamed("doomed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		rep := verifyUntilConverged(t, cfg, sink)
		var out bytes.Buffer
		rep.Print(&out)
		t.Logf("verify %s:\n%s", sink, out.String())
		record("no fault, churn ("+sink+", kfake/embedded)", wg.changes.Load(), rep.Events, rep.Duplicates, 0)
		if rep.Events == 0 || len(rep.OrderViolations) != 0 {
			t.Fatalf("%s: read %d events, %d order violations", sink, rep.Events, len(rep.OrderViolations))
		}
	}
	verifyUntilConverged(t, cfg, "kafka", func(r *verify.Report) bool { return r.Tombstones > 0 })

	// With kubewire stopped, a change it cannot see must show as divergence,
	// through the CLI with its exit code.
	k.Shutdown(t)
	l, err := kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("list: %v (%d items)", err, len(l.Items))
	}
	gone := l.Items[0].Name
	if err := kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath, kubeconfig := filepath.Join(dir, "kubewire.yaml"), filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WriteKubeconfig(kubeconfig, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		var stdout, stderr bytes.Buffer
		code := cli.Main([]string{"verify", "--config", cfgPath, "--kubeconfig", kubeconfig, "--sink", sink}, &stdout, &stderr)
		if code != cli.ExitDiverged || !strings.Contains(stdout.String(), "extra configmaps/"+ns+"/"+gone) {
			t.Fatalf("%s: exit %d, want %d naming the extra key %s\nstdout:\n%s\nstderr:\n%s", sink, code, cli.ExitDiverged, gone, stdout.String(), stderr.String())
		}
	}
}

func configMapNamed(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestVerifyJudgesSuppressedUpdatesByContentNotResourceVersion(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	yaml := strings.Replace(brokers(t, ns), "sinks: [kafka, js]}",
		"sinks: [kafka, js], ignorePaths: [\"metadata.annotations['heartbeat']\"]}", 1)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cms := kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "beating", Annotations: map[string]string{"heartbeat": "0"}}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	for _, sink := range []string{"kafka", "js"} {
		verifyUntilConverged(t, cfg, sink)
	}
	// Heartbeats change the resourceVersion but nothing kubewire emits:
	// the stream keeps the old version, and verify must still agree.
	for i := 1; i <= 3; i++ {
		cm.Annotations["heartbeat"] = fmt.Sprint(i)
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "the heartbeats to be suppressed", func() bool {
		return testutil.ToFloat64(metrics.UpdatesSuppressed.WithLabelValues("configmaps", "ignored_paths")) >= 3
	})
	for _, sink := range []string{"kafka", "js"} {
		rep := verifyUntilConverged(t, cfg, sink)
		if rep.Resources[0].InView != 1 {
			t.Fatalf("%s: view holds %d objects", sink, rep.Resources[0].InView)
		}
	}
	// A real change missed while kubewire is down is stale, whatever the
	// suppression rules.
	k.Shutdown(t)
	cm.Data["v"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		rep, err := verify.Run(ctx, verify.Options{Config: cfg, Sink: sink, REST: cluster.RESTConfig(testcluster.AdminUser)})
		if err != nil {
			t.Fatal(err)
		}
		if d := rep.Resources[0].Divergent; len(d) != 1 || !strings.HasPrefix(d[0], "stale configmaps/"+ns+"/beating") {
			t.Fatalf("%s: divergent %v, want the missed change reported as stale", sink, d)
		}
	}
}

// brokerConfig routes ns's ConfigMaps to a Kafka sink "kafka" and a
// JetStream sink "js", each in its own topic and stream, and to a stdout
// sink "out" when extraSinks defines it.
func brokerConfig(ns, kafkaAddr, natsURL, dispatch, extraSinks string) string {
	refs := "kafka, js"
	if extraSinks != "" {
		refs += ", out"
	}
	return fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: faults
%sresources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [%s]}
sinks:
%s  - name: kafka
    type: kafka
    kafka:
      brokers: [%q]
      topic: "k8s.%s.{resource}"
      createTopics: {partitions: 3, replicationFactor: 1}
  - name: js
    type: nats
    nats:
      mode: jetstream
      servers: [%q]
      subject: "kw.%s.{namespace}.{name}"
      jetstream: {stream: {name: KW_%s}}
`, dispatch, ns, refs, extraSinks, kafkaAddr, ns, natsURL, ns, strings.ToUpper(strings.ReplaceAll(ns, "-", "_")))
}
