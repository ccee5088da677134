package cli_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
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
	ns := newNamespace(ctx, t, cs, "history-js")
	srv := natstest.Embedded(t)
	yaml := fmt.Sprintf(historyJetStreamE2EConfig, srv.ClientURL(), ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k, points := writeAroundSnapshots(ctx, t, cms, yaml, rc)
	js := jetStreamOf(t, srv.ClientURL())
	subject := kwnats.ResourceSubject(kwnats.DefaultSubject, "e2e", "", "v1", "configmaps")
	last := points[len(points)-1]
	lastRV, _ := strconv.ParseUint(last, 10, 64)
	var held map[string]string
	testkit.Within(t, time.Minute, "the stream to hold the state at the last write", func() bool {
		h, err := consumer.HistoryAtJetStream(ctx, consumer.JetStreamHistoryConfig{JetStream: js, Stream: "HISTORY", Subject: subject, Resource: "configmaps", RV: lastRV})
		if err != nil {
			return false
		}
		held = heldState(h.View.Objects("configmaps"))
		return maps.Equal(held, exactList(ctx, t, cms, last))
	}, func() string { return fmt.Sprintf("held %v, want %v", held, exactList(ctx, t, cms, last)) })
	k.Shutdown(t)
	if code, _, errOut := run("history", "--config", path, "--sink", "events", "--at", "rv:"+points[0]); code != cli.ExitNoSnapshot {
		t.Errorf("history --at rv:%s, before kubewire started: exit %d, want %d\n%s", points[0], code, cli.ExitNoSnapshot, errOut)
	}
	for _, rv := range points[2:] {
		want := exactList(ctx, t, cms, rv)
		got, code, errOut := historyAt(path, "rv:"+rv)
		if code != cli.ExitOK || !maps.Equal(got, want) {
			t.Errorf("history --at rv:%s: exit %d, got %v, want %v\n%s", rv, code, got, want, errOut)
		}
	}
}
