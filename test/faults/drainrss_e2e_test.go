//go:build e2e

package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// drainRSSBound is issue 46's bound on the shipped binary's peak RSS while
// it drains its spools with the default settings: well under the chart's
// 512Mi limit, so that a pod is not OOM-killed mid-drain and made to start
// the drain again.
const drainRSSBound = 300 << 20

// The shipped binary drains a large spool after a restart within the
// memory a pod is given (issue 46, point 1). kubewire runs with its default
// settings against real Kafka and nats-server, streaming ConfigMaps of about
// 10 KB. Both brokers go down while the ConfigMaps are patched; once the two
// spools together hold KUBEWIRE_DRAIN_SPOOL_MB (40 by default; `make
// bench-drain` runs 500), kubewire is SIGKILLed and started again, so it
// relists into a full spool, and the brokers come back. The peak RSS of each
// process (VmHWM, the kernel's own high-water mark, so no sample misses a
// spike) must stay under drainRSSBound. KUBEWIRE_DRAIN_PROFILE=DIR writes a
// heap profile of the second process every 5 s of its drain to DIR.
func TestE2EShippedBinaryDrainsALargeSpoolAfterARestartWithinThreeHundredMB(t *testing.T) {
	spoolMB := 40
	if v := os.Getenv("KUBEWIRE_DRAIN_SPOOL_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("KUBEWIRE_DRAIN_SPOOL_MB=%q: want a positive number of MB", v)
		}
		spoolMB = n
	}
	const objects = 1000
	payload := func(i int64) string { return fmt.Sprintf("%08d", i) + strings.Repeat("x", 10<<10) }

	ctx := context.Background()
	ns := namespace(t)
	cms := kube.CoreV1().ConfigMaps(ns)
	parallel(t, 4, objects, func(i int) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i)}, Data: map[string]string{"v": payload(0)}}, metav1.CreateOptions{})
		return err
	})

	p := newProcs(t, ns)
	kb := kafkatest.Start(t, nil)
	nsrv := natstest.Start(t)
	if err := os.WriteFile(p.config, []byte(brokerConfig(ns, kb.Addr, nsrv.URL(), "", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	profAddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	flags := []string{"--http-address", fmt.Sprintf("127.0.0.1:%d", port), "--profiling=" + profAddr}
	first, _ := p.start(t, "first.jsonl", flags...)
	synced := func() bool {
		m, ok := scrape(url)
		return ok && m.get("kubewire_informer_synced", "", "") == 1
	}
	empty := func() bool {
		m, ok := scrape(url)
		return ok && m.get("kubewire_buffer_events", "sink", "kafka") == 0 && m.get("kubewire_buffer_events", "sink", "js") == 0 &&
			m.get("kubewire_spool_events", "sink", "kafka") == 0 && m.get("kubewire_spool_events", "sink", "js") == 0
	}
	testkit.Within(t, 3*time.Minute, "the first snapshot delivered", func() bool { return synced() && empty() })

	kb.Kill()
	nsrv.Kill()
	profiledOutage := profileHeapEvery(profAddr, "outage", 15*time.Second)
	stop := make(chan struct{})
	var patched atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(w); ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				body, _ := json.Marshal(map[string]any{"data": map[string]string{"v": payload(i)}})
				if _, err := cms.Patch(ctx, fmt.Sprintf("big-%d", i%objects), types.MergePatchType, body, metav1.PatchOptions{}); err == nil {
					patched.Add(1)
				}
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	spooled := func() float64 {
		m, _ := scrape(url)
		return m.get("kubewire_spool_bytes", "sink", "kafka") + m.get("kubewire_spool_bytes", "sink", "js")
	}
	outageFrom := time.Now()
	lastLog := outageFrom
	testkit.Within(t, 30*time.Minute, fmt.Sprintf("%d MB spooled", spoolMB), func() bool {
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			m, _ := scrape(url)
			t.Logf("%s: %d patches, %.0f observed; spooled: kafka %.0f events (%.0f written, %.0f MB), js %.0f events (%.0f written, %.0f MB); RSS %d MB",
				time.Since(outageFrom).Round(time.Second), patched.Load(), m.sum("kubewire_events_observed_total", "resource", "configmaps"),
				m.get("kubewire_spool_events", "sink", "kafka"), m.get("kubewire_spool_written_total", "sink", "kafka"), m.get("kubewire_spool_bytes", "sink", "kafka")/(1<<20),
				m.get("kubewire_spool_events", "sink", "js"), m.get("kubewire_spool_written_total", "sink", "js"), m.get("kubewire_spool_bytes", "sink", "js")/(1<<20),
				rssKB(first.Process.Pid)>>10)
		}
		return spooled() >= float64(spoolMB<<20)
	})
	atKill := spooled()
	profiledOutage()
	firstPeak := peakRSS(first.Process.Pid)
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = p.waits["first.jsonl"]()
	t.Logf("spooled %.0f MB in %s (%d patches); the first process peaked at %d MB", atKill/(1<<20), time.Since(outageFrom).Round(time.Second), patched.Load(), firstPeak>>20)

	second, _ := p.start(t, "second.jsonl", flags...)
	testkit.Within(t, 3*time.Minute, "the relist after the restart", synced)
	kb.Restart(t)
	nsrv.Begin()
	drainFrom := time.Now()
	profiled := profileHeapEvery(profAddr, "drain", 5*time.Second)
	testkit.Within(t, 20*time.Minute, "both spools drained", empty)
	drained := time.Since(drainFrom)
	profiled()
	close(stop)
	wg.Wait()
	secondPeak := peakRSS(second.Process.Pid)
	line := fmt.Sprintf("%d objects of 10 KB, %.0f MB spooled at the kill, %d patches; peak RSS %d MB before the kill, %d MB through the restart and the drain (%s)",
		objects, atKill/(1<<20), patched.Load(), firstPeak>>20, secondPeak>>20, drained.Round(time.Second))
	t.Log(line)
	record("shipped binary RSS, restart into a full spool and its drain ("+line+")", patched.Load(), 0, 0, 0)
	for _, r := range []struct {
		what string
		peak int64
	}{{"before the kill", firstPeak}, {"through the restart and the drain", secondPeak}} {
		if r.peak > drainRSSBound {
			t.Errorf("RSS peaked at %d MB %s, above %d MB", r.peak>>20, r.what, drainRSSBound>>20)
		}
	}
}

// parallel runs do(0..n-1) on workers goroutines and fails t on the first
// error.
func parallel(t *testing.T, workers, n int, do func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := do(int(i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// peakRSS is the process's high-water mark of resident memory, in bytes.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// profileHeapEvery writes a heap profile from the process serving pprof at
// addr every interval to KUBEWIRE_DRAIN_PROFILE, if set, until the returned
// func is called. The files are named by prefix and a sequence number.
func profileHeapEvery(addr, prefix string, interval time.Duration) (stop func()) {
	dir := os.Getenv("KUBEWIRE_DRAIN_PROFILE")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
			if err != nil {
				continue
			}
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-heap-%03d.pprof", prefix, n)))
			if err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
			}
			resp.Body.Close()
		}
	}()
	return func() { close(done); wg.Wait() }
}
