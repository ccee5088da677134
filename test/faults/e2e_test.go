//go:build e2e

package faults_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// realBrokers routes ns's ConfigMaps to real Apache Kafka, a nats-server
// process with JetStream, and stdout, with the given buffer and overflow
// policy on the broker sinks.
func realBrokers(t *testing.T, ns string, buffer int, overflow string) (string, *kafkatest.Broker, *natstest.Server) {
	t.Helper()
	kb := kafkatest.Start(t, nil)
	nsrv := natstest.Start(t)
	cfg := brokerConfig(ns, kb.Addr, nsrv.URL(), fmt.Sprintf("dispatch: {bufferEvents: %d, drainTimeout: 60s}\n", buffer),
		"  - name: out\n    type: stdout\n")
	for _, typ := range []string{"kafka", "nats"} {
		cfg = strings.Replace(cfg, "    type: "+typ+"\n", "    type: "+typ+"\n    overflow: "+overflow+"\n", 1)
	}
	return cfg, kb, nsrv
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestE2EBrokersKilledForThirtySecondsOverflowIntoConflationAndStillConverge(t *testing.T) {
	ns := namespace(t)
	const buffer = 40
	yaml, kb, nsrv := realBrokers(t, ns, buffer, config.OverflowConflate)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	stop := make(chan struct{})
	wg := churn(ns, stop)
	testkit.Eventually(t, "events on every sink", func() bool { return k.App.Ready() && len(k.Events(t)) > 40 })

	conflatedBefore := metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "kafka"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := app.ServeHTTP(ctx, "127.0.0.1:0", k.App.Ready, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	readyz := func() int {
		resp, err := http.Get("http://" + addr.String() + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz = %d with every sink up", code)
	}
	kb.Kill()
	nsrv.Kill()
	testkit.Eventually(t, "/readyz to answer 503 while the brokers are down", func() bool { return readyz() == http.StatusServiceUnavailable })

	// The outage lasts 30 s of churn. Memory is sampled after 10 s and at
	// the end: the buffer is bounded, so the heap must not keep growing.
	outage := time.After(30 * time.Second)
	early := time.After(10 * time.Second)
	var heapEarly, heapLate uint64
	stdoutDuring := len(k.Events(t))
wait:
	for {
		select {
		case <-early:
			heapEarly = heap()
		case <-outage:
			heapLate = heap()
			break wait
		}
	}
	if got := len(k.Events(t)); got <= stdoutDuring {
		t.Errorf("the stdout sink stopped flowing while the brokers were down (%d events before, %d after)", stdoutDuring, got)
	}
	queued := testutil.ToFloat64(metrics.BufferEvents.WithLabelValues("kafka"))
	t.Logf("after 30 s down: kafka buffer %v events, heap %d KB at 10 s and %d KB at 30 s", queued, heapEarly>>10, heapLate>>10)
	if queued > buffer+20+16*100 {
		t.Errorf("kafka buffer holds %v events; want about one per object (limit %d + 20 objects + in-flight batches)", queued, buffer)
	}
	if heapLate > heapEarly+32<<20 {
		t.Errorf("heap grew from %d KB to %d KB during the outage", heapEarly>>10, heapLate>>10)
	}
	if metrics.Sum("kubewire_events_conflated_total", map[string]string{"sink": "kafka"}) <= conflatedBefore {
		t.Error("the outage did not overflow into conflation")
	}

	kb.Restart(t)
	nsrv.Begin()
	testkit.Eventually(t, "/readyz to answer 200 after the brokers return", func() bool { return readyz() == http.StatusOK })
	close(stop)
	wg.Wait()
	// Both must converge with no order violation. On Kafka this rests on the
	// idempotent producer: a produce request kubewire gave up on while the
	// broker restarted can still be in the broker's queue, and only the
	// epoch check keeps it from landing after its retry.
	for sink, name := range map[string]string{"js": "nats-server JetStream", "kafka": "real Kafka"} {
		rep := verifyUntilConverged(t, cfg, sink)
		if len(rep.OrderViolations) != 0 {
			t.Fatalf("%s: order violations %v", sink, rep.OrderViolations)
		}
		var evs []event.Event
		read(t, cfg, sink, "configmaps", func(ev *event.Event) { evs = append(evs, *ev) })
		wg.checkOrder(t, evs)
		record(fmt.Sprintf("brokers SIGKILLed 30 s, buffer conflating (%s)", name), wg.changes.Load(), rep.Events, rep.Duplicates, 0)
	}
}

func TestE2EGracefulShutdownUnderLoadDeliversEverythingItObserved(t *testing.T) {
	ns := namespace(t)
	yaml, _, _ := realBrokers(t, ns, 10000, config.OverflowSpool)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	stop := make(chan struct{})
	wg := churn(ns, stop)
	testkit.Eventually(t, "load", func() bool { return len(k.Events(t)) > 200 })
	k.Shutdown(t) // what SIGTERM does: stop the informers, drain
	close(stop)
	wg.Wait()
	if k.Undelivered != 0 {
		t.Fatalf("shutdown left %d events undelivered", k.Undelivered)
	}
	// Everything the stdout sink saw must be in Kafka and JetStream too.
	want := map[string]bool{}
	for _, ev := range k.Events(t) {
		if strings.HasPrefix(ev.Type(), "io.kubewire.object.") {
			want[ev.ID()] = true
		}
	}
	for _, sink := range []string{"kafka", "js"} {
		got := map[string]bool{}
		read(t, cfg, sink, "configmaps", func(ev *event.Event) { got[ev.ID()] = true })
		missing := 0
		for id := range want {
			if !got[id] {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s lacks %d of the %d events observed before shutdown", sink, missing, len(want))
		}
		record("graceful shutdown under load ("+sink+")", wg.changes.Load(), len(got), 0, missing)
	}
}
