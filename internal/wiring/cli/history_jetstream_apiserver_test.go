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
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// historyJetStreamE2EConfig streams one namespace's ConfigMaps, every
// update, to a JetStream stream, and to stdout so that the test sees when
// snapshots completed.
const historyJetStreamE2EConfig = `apiVersion: kubewire.io/v1alpha1
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
    type: nats
    nats:
      mode: jetstream
      servers: [%[1]s]
      jetstream: {stream: {name: HISTORY}}
  - name: out
    type: stdout
`

// The oracle of TestHistoryAtAResourceVersionMatchesAnExactListOfTheAPIServerAtIt,
// for a JetStream sink: history --at rv:R prints what an exact LIST at R
// returns, at points after the initial snapshot and after a periodic one.
func TestHistoryOfAJetStreamSinkAtAResourceVersionMatchesAnExactListOfTheAPIServerAtIt(t *testing.T) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("history-js-%d", time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Embedded(t)
	yaml := fmt.Sprintf(historyJetStreamE2EConfig, srv.ClientURL(), ns)
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
	nc, err := natsgo.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	subject := kwnats.ResourceSubject(kwnats.DefaultSubject, "e2e", "", "v1", "configmaps")
	last := points[len(points)-1]
	lastRV, _ := strconv.ParseUint(last, 10, 64)
	var held map[string]string
	testkit.Within(t, time.Minute, "the stream to hold the state at the last write", func() bool {
		h, err := consumer.HistoryAtJetStream(ctx, consumer.JetStreamHistoryConfig{JetStream: js, Stream: "HISTORY", Subject: subject, Resource: "configmaps", RV: lastRV})
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
	if code, _, errOut := run("history", "--config", path, "--sink", "events", "--at", "rv:"+points[0]); code != cli.ExitNoSnapshot {
		t.Errorf("history --at rv:%s, before kubewire started: exit %d, want %d\n%s", points[0], code, cli.ExitNoSnapshot, errOut)
	}
	for _, rv := range points[2:] {
		want := oracle(rv)
		code, out, errOut := run("history", "--config", path, "--sink", "events", "--at", "rv:"+rv, "-o", "json")
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var cm corev1.ConfigMap
			if l != "" && json.Unmarshal([]byte(l), &cm) == nil {
				got[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
			}
		}
		if code != cli.ExitOK || !maps.Equal(got, want) {
			t.Errorf("history --at rv:%s: exit %d, got %v, want %v\n%s", rv, code, got, want, errOut)
		}
	}
}
