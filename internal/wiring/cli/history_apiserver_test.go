package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// historyE2EConfig streams one namespace's ConfigMaps, every update, to
// kfake, and to stdout so that the test sees when snapshots completed.
const historyE2EConfig = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: e2e
resources:
  - version: v1
    resource: configmaps
    namespaces: [%[2]s]
    updates: all
    snapshotInterval: 10s
    sinks: [events, out]
sinks:
  - name: events
    type: kafka
    kafka:
      brokers: [%[1]s]
      topic: e2e.history.{resource}
      createTopics: {partitions: 2, replicationFactor: 1}
  - name: out
    type: stdout
`

// The API server is the oracle: an exact LIST at a resourceVersion R is
// the true state at R, and history --at rv:R must print the same objects at
// the same versions with the same data.
func TestHistoryAtAResourceVersionMatchesAnExactListOfTheAPIServerAtIt(t *testing.T) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("history-%d", time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	yaml := fmt.Sprintf(historyE2EConfig, kc.ListenAddrs()[0], ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
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
	// Writes in two rounds, after the initial snapshot and after the
	// first periodic one (10s, the shortest interval allowed), so that
	// the points fall just after snapshots and between them.
	for round := range 2 {
		k.WaitFor(t, "a snapshot to complete", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > round })
		put("a", strconv.Itoa(round+2))
		put(fmt.Sprintf("c%d", round), "1")
		if round == 0 {
			del("b")
		}
		put("a", strconv.Itoa(round+10))
	}
	oracle := func(rv string) map[string]string {
		l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, cm := range l.Items {
			out[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
		}
		return out
	}
	history := func(rv string) (map[string]string, int, string) {
		code, out, errOut := run("history", "--config", path, "--sink", "events", "--at", "rv:"+rv, "-o", "json")
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var cm corev1.ConfigMap
			if l != "" && json.Unmarshal([]byte(l), &cm) == nil {
				got[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
			}
		}
		return got, code, errOut
	}
	last := points[len(points)-1]
	// The only wait: until the Kafka sink delivered the last write. It
	// asks the consumer package, not the command, while kubewire runs:
	// the command sets up logging for the process, which the in-process
	// kubewire uses.
	lastRV, _ := strconv.ParseUint(last, 10, 64)
	var held map[string]string
	testkit.Within(t, time.Minute, "the topic to hold the state at the last write", func() bool {
		h, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: kc.ListenAddrs(), Topic: "e2e.history.configmaps", Resource: "configmaps", RV: lastRV})
		if err != nil {
			return false
		}
		held = map[string]string{}
		for _, o := range h.View.Objects("configmaps") {
			var cm corev1.ConfigMap
			_ = json.Unmarshal(o.JSON, &cm)
			held[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
		}
		return maps.Equal(held, oracle(last))
	}, func() string { return fmt.Sprintf("held %v, want %v", held, oracle(last)) })
	k.Shutdown(t)
	// The first write is older than the first snapshot's list.
	if _, code, errOut := history(points[0]); code != cli.ExitNoSnapshot {
		t.Errorf("history --at rv:%s, before kubewire started: exit %d, want %d\n%s", points[0], code, cli.ExitNoSnapshot, errOut)
	}
	for _, rv := range points[2:] { // the first two are before kubewire started
		want := oracle(rv)
		got, code, errOut := history(rv)
		if code != cli.ExitOK || !maps.Equal(got, want) {
			t.Errorf("history --at rv:%s: exit %d, got %v, want %v\n%s", rv, code, got, want, errOut)
		}
	}
}
