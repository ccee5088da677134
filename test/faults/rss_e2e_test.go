//go:build e2e

package faults_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// The shipped binary through an outage and its drain (issue 27, defect 3):
// a black-box run saw kubewire's RSS reach 690 MB while it drained a spool
// with about 3,300 objects, above the chart's 512Mi limit. Here the binary
// runs with the default buffers against real Kafka and nats-server, 3,300
// ConfigMaps of about 1 KB, a snapshot every 10 s and churn, both brokers
// down for 40 s; RSS is sampled from /proc every 200 ms until the spools
// have drained.
func TestE2EShippedBinaryRSSStaysBoundedThroughAnOutageAndItsDrain(t *testing.T) {
	const objects = 3300
	ctx := context.Background()
	ns := namespace(t)
	cms := kube.CoreV1().ConfigMaps(ns)
	payload := strings.Repeat("x", 1000)
	var next atomic.Int64
	var cwg sync.WaitGroup
	for range 4 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for i := next.Add(1); i <= objects; i = next.Add(1) {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("obj-%d", i)}, Data: map[string]string{"v": payload}}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	cwg.Wait()
	if t.Failed() {
		return
	}

	p := newProcs(t, ns)
	kb := kafkatest.Start(t, nil)
	nsrv := natstest.Start(t)
	// The default buffers (dispatch.bufferEvents and bufferBytes) and
	// spool size; snapshots every 10 s, as a busy deployment might set.
	yaml := brokerConfig(ns, kb.Addr, nsrv.URL(), "dispatch: {drainTimeout: 30s}\n", "")
	yaml = strings.Replace(yaml, "sinks: [kafka", "snapshotInterval: 10s, sinks: [kafka", 1)
	if err := os.WriteFile(p.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	cmd, _ := p.start(t, "out.jsonl", "--http-address", fmt.Sprintf("127.0.0.1:%d", port))
	pid := cmd.Process.Pid

	var peak atomic.Int64
	phase := atomic.Value{}
	phase.Store("start")
	peaks := sync.Map{} // phase -> peak RSS KB
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			r := rssKB(pid)
			if r > peak.Load() {
				peak.Store(r)
			}
			ph := phase.Load().(string)
			if v, ok := peaks.Load(ph); !ok || r > v.(int64) {
				peaks.Store(ph, r)
			}
		}
	}()
	synced := func() bool {
		m, ok := scrape(url)
		return ok && m.get("kubewire_informer_synced", "", "") == 1 &&
			m.get("kubewire_buffer_events", "sink", "kafka") == 0 && m.get("kubewire_buffer_events", "sink", "js") == 0
	}
	testkit.Within(t, 3*time.Minute, "the initial snapshot delivered", synced)
	stop := make(chan struct{})
	wg := churnObjects(ns, stop, churnTick, objects)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	phase.Store("steady")
	steadyFrom := time.Now()
	testkit.Eventually(t, "20 s of steady streaming", func() bool { return time.Since(steadyFrom) > 20*time.Second })
	before := rssKB(pid)

	phase.Store("outage")
	kb.Kill()
	nsrv.Kill()
	outageFrom := time.Now()
	testkit.Within(t, time.Minute, "a 40 s outage", func() bool { return time.Since(outageFrom) > 40*time.Second })
	var spooled float64
	// A scrape can time out on a loaded machine: ask until it answers.
	testkit.Within(t, 30*time.Second, "a scrape of /metrics during the outage", func() bool {
		m, ok := scrape(url)
		spooled = m.get("kubewire_spool_events", "sink", "kafka") + m.get("kubewire_spool_events", "sink", "js")
		return ok
	})
	kb.Restart(t)
	nsrv.Begin()
	phase.Store("drain")
	drainFrom := time.Now()
	testkit.Within(t, 5*time.Minute, "both spools drained", func() bool {
		m, ok := scrape(url)
		return ok && m.get("kubewire_spool_events", "sink", "kafka") == 0 && m.get("kubewire_spool_events", "sink", "js") == 0
	})
	drained := time.Since(drainFrom)
	phase.Store("after")
	afterFrom := time.Now()
	testkit.Eventually(t, "10 s after the drain", func() bool { return time.Since(afterFrom) > 10*time.Second })
	close(stop)
	wg.Wait()
	close(stopSampling)
	<-sampled

	get := func(ph string) int64 {
		v, _ := peaks.Load(ph)
		n, _ := v.(int64)
		return n
	}
	line := fmt.Sprintf("%d objects, %d changes; RSS %d MB before the outage; peak %d MB during it (%.0f events spooled), %d MB while draining (%s), %d MB after",
		objects, wg.changes.Load(), before>>10, get("outage")>>10, spooled, get("drain")>>10, drained.Round(time.Second), get("after")>>10)
	t.Log(line)
	record("shipped binary RSS, 40 s outage and drain ("+line+")", wg.changes.Load(), 0, 0, 0)
	if spooled == 0 {
		t.Fatal("nothing was spooled: the outage did not reach the spool")
	}
	bound := before + (config.DefaultBufferBytes+64<<20)>>10
	for _, ph := range []string{"outage", "drain", "after"} {
		if r := get(ph); r > bound {
			t.Errorf("RSS reached %d MB (%s), more than %d MB before the outage plus dispatch.bufferBytes (%d MB) and 64 MB", r>>10, ph, before>>10, config.DefaultBufferBytes>>20)
		}
	}
	if p := peak.Load(); p > 512<<10 {
		t.Errorf("RSS peaked at %d MB, above the chart's 512Mi limit", p>>10)
	}
}
