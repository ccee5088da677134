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
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// historyE2EConfig streams one namespace's ConfigMaps, every update, to
// the Kafka broker at %[1]s, and to stdout so that the test sees when
// snapshots completed.
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
	historyMatchesExactLists(t, startKfake(t).ListenAddrs()[0])
}

// historyMatchesExactLists is the oracle test against the Kafka broker at
// addr. It returns the config's path, once kubewire has stopped, and the
// last point it checked.
func historyMatchesExactLists(t *testing.T, addr string) (path, last string) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t, cs, "history")
	yaml := fmt.Sprintf(historyE2EConfig, addr, ns)
	path = write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k, points := writeAroundSnapshots(ctx, t, cms, yaml, rc)
	last = points[len(points)-1]
	// The only wait: until the Kafka sink delivered the last write. It
	// asks the consumer package, not the command, while kubewire runs:
	// the command sets up logging for the process, which the in-process
	// kubewire uses.
	lastRV, _ := strconv.ParseUint(last, 10, 64)
	var held map[string]string
	testkit.Within(t, time.Minute, "the topic to hold the state at the last write", func() bool {
		h, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{Brokers: []string{addr}, Topic: "e2e.history.configmaps", Resource: "configmaps", RV: lastRV})
		if err != nil {
			return false
		}
		held = heldState(h.View.Objects("configmaps"))
		return maps.Equal(held, exactList(ctx, t, cms, last))
	}, func() string { return fmt.Sprintf("held %v, want %v", held, exactList(ctx, t, cms, last)) })
	k.Shutdown(t)
	// The first write is older than the first snapshot's list.
	if _, code, errOut := historyAt(path, "rv:"+points[0]); code != cli.ExitNoSnapshot {
		t.Errorf("history --at rv:%s, before kubewire started: exit %d, want %d\n%s", points[0], code, cli.ExitNoSnapshot, errOut)
	}
	for _, rv := range points[2:] { // the first two are before kubewire started
		want := exactList(ctx, t, cms, rv)
		got, code, errOut := historyAt(path, "rv:"+rv)
		if code != cli.ExitOK || !maps.Equal(got, want) {
			t.Errorf("history --at rv:%s: exit %d, got %v, want %v\n%s", rv, code, got, want, errOut)
		}
	}
	return path, last
}
