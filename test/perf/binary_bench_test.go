//go:build bench

package perf

// BenchmarkShippedBinary runs `kubewire run` as the user runs it: a process
// of its own, built from cmd/kubewire, watching the ConfigMaps of one
// namespace on the test kube-apiserver and publishing to one sink. The
// pipeline benchmarks measure kubewire inside the test process against a
// replayed watch stream; this one measures the binary against the real
// apiserver's watch, with the runtime, metrics server and GOMAXPROCS adapter
// the binary has, and counts only the kubewire process.
//
// For each sink (stdout to /dev/null, HTTP to a receiver in the test
// process, NATS core and JetStream on a nats-server process, real Apache
// Kafka), one broker at a time, it creates small ConfigMaps once, starts
// kubewire, waits for the snapshot, then patches the ConfigMaps round-robin
// at a fixed rate from the test process. Over a fixed window it reads, for
// the kubewire process only:
//
//   - CPU: utime+stime from /proc/<pid>/stat (clock ticks, 10 ms here);
//   - context switches: voluntary plus involuntary, summed over every
//     thread in /proc/<pid>/task/*/status at the start and the end. A
//     thread that exits inside the window takes its switches with it (an
//     undercount); threads-gone reports how many did, 0 in every run so far;
//   - events: kubewire_events_published_total of the sink, from the
//     binary's own /metrics, scraped once before and once after the window.
//
// It reports cpu-µs/event and ctxsw/event (the names the pipeline
// benchmarks use, so benchstat lines them up), events/s and writes/s. One
// iteration is one window; run it with -benchtime 1x.
//
//	make bench-binary
//	go test -tags bench -run '^$' -bench ShippedBinary -benchtime 1x -count 3 -timeout 60m ./test/perf
//	KUBEWIRE_BINARY_BENCH_SINKS=http,nats go test -tags bench -run '^$' -bench ShippedBinary -benchtime 1x ./test/perf
//	KUBEWIRE_BINARY_BENCH_SMOKE=1 go test -tags bench -run '^$' -bench ShippedBinary -benchtime 1x ./test/perf
//
// Settings: KUBEWIRE_BINARY_BENCH_SINKS (default
// "stdout,http,nats,jetstream,kafka"), KUBEWIRE_BINARY_BENCH_RATES (writes
// per second and window, default "200:20s,20:30s"; a rate of 0 measures the
// process idle and reports cpu-µs/s and ctxsw/s instead),
// KUBEWIRE_BINARY_BENCH_OBJECTS (default 2000), KUBEWIRE_BINARY_BENCH_THREADS=1
// (log each thread's switches per window), KUBEWIRE_BINARY_BENCH_PROFILE=DIR
// (run kubewire with --profiling and write a CPU profile of each rate's
// first window to DIR; the profiler's signals add switches, so a profiled
// run's figures are not the unprofiled ones). KUBEWIRE_BINARY_BENCH_SMOKE=1
// is a check that the harness still runs: stdout only, 200 objects, 200/s
// for 3 s.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// binaryRate is one churn rate and the window it is measured over.
type binaryRate struct {
	perSecond int
	window    time.Duration
}

// binaryBenchSettings reads the KUBEWIRE_BINARY_BENCH_* variables.
func binaryBenchSettings(b *testing.B) (sinkNames []string, rates []binaryRate, objects int, warmup time.Duration) {
	smoke := os.Getenv("KUBEWIRE_BINARY_BENCH_SMOKE") != ""
	defSinks, defRates, defObjects := "stdout,http,nats,jetstream,kafka", "200:20s,20:30s", 2000
	warmup = 3 * time.Second
	if smoke {
		defSinks, defRates, defObjects = "stdout", "200:3s", 200
		warmup = time.Second
	}
	for _, s := range strings.Split(cmpOr(os.Getenv("KUBEWIRE_BINARY_BENCH_SINKS"), defSinks), ",") {
		sinkNames = append(sinkNames, strings.TrimSpace(s))
	}
	for _, s := range strings.Split(cmpOr(os.Getenv("KUBEWIRE_BINARY_BENCH_RATES"), defRates), ",") {
		r, w, ok := strings.Cut(strings.TrimSpace(s), ":")
		n, err := strconv.Atoi(r)
		d, derr := time.ParseDuration(w)
		if !ok || err != nil || derr != nil || n < 0 || d <= 0 {
			b.Fatalf("KUBEWIRE_BINARY_BENCH_RATES: %q is not RATE:WINDOW (for example 200:20s)", s)
		}
		rates = append(rates, binaryRate{n, d})
	}
	objects = envInt("KUBEWIRE_BINARY_BENCH_OBJECTS", defObjects)
	return sinkNames, rates, objects, warmup
}

func BenchmarkShippedBinary(b *testing.B) {
	sinkNames, rates, objects, warmup := binaryBenchSettings(b)
	bin := buildKubewireBinary(b)
	kube := kubernetes.NewForConfigOrDie(adminConfig())
	ns := smallConfigMaps(b, kube, objects)
	sinkYAML := map[string]func(b *testing.B) string{
		"stdout": func(*testing.B) string { return "  - {name: out, type: stdout}" },
		"http":   func(b *testing.B) string { return httpSinkYAML(startReceiver(b)) },
		"nats": func(b *testing.B) string {
			return `  - name: out
    type: nats
    nats: {mode: core, servers: [` + natstest.Start(b).URL() + `], subject: "kw.bench.{namespace}.{name}"}`
		},
		"jetstream": func(b *testing.B) string { return jetStreamSinkYAML(natstest.Start(b).URL()) },
		"kafka":     func(b *testing.B) string { return kfakeSinkYAML(kafkatest.Start(b, nil).Addr) },
	}
	for _, name := range sinkNames {
		yaml, ok := sinkYAML[name]
		if !ok {
			b.Fatalf("KUBEWIRE_BINARY_BENCH_SINKS: %q is not one of stdout, http, nats, jetstream, kafka", name)
		}
		b.Run(name, func(b *testing.B) {
			// The broker, and then kubewire, live as long as this sink's
			// rates: Cleanup runs after the sub-benchmarks.
			k := startKubewireBinary(b, bin, binaryBenchConfig(b, ns, yaml(b)))
			testkit.Within(b, 3*time.Minute, "the snapshot of "+strconv.Itoa(objects)+" ConfigMaps published", func() bool {
				n, ok := k.published()
				return ok && n >= float64(objects)
			}, k.stderrTail)
			for _, r := range rates {
				b.Run(fmt.Sprintf("%d-per-s", r.perSecond), func(b *testing.B) {
					measureBinary(b, k, kube, ns, objects, r, warmup)
				})
			}
		})
	}
}

// measureBinary churns at r while it measures the kubewire process over
// b.N windows of r.window each.
func measureBinary(b *testing.B, k *binaryProcess, kube kubernetes.Interface, ns string, objects int, r binaryRate, warmup time.Duration) {
	b.StopTimer()
	c := &churn{}
	if r.perSecond > 0 {
		c = startChurn(kube, ns, objects, r.perSecond)
		defer c.stop()
	}
	// The warm-up lets the process settle at the rate: buffers, connections,
	// and the GOMAXPROCS adapter, which looks once a second.
	time.Sleep(warmup)
	var cpu time.Duration
	var switches, events, writes float64
	var wall time.Duration
	threads, gone := 0, 0
	for i := range b.N {
		if i == 0 && k.pprof != "" {
			profiled := k.profile(b, r.window)
			defer func() { <-profiled }()
		}
		// The scrapes lie outside the CPU and switch counts: before the
		// first reading, after the last.
		ev0, ok0 := k.published()
		p0 := k.sample(b)
		w0 := c.done.Load()
		t0 := time.Now()
		b.StartTimer()
		time.Sleep(r.window)
		b.StopTimer()
		p1 := k.sample(b)
		w1 := c.done.Load()
		ev1, ok1 := k.published()
		if !ok0 || !ok1 {
			b.Fatalf("kubewire's /metrics did not answer\n%s", k.stderrTail())
		}
		wall += time.Since(t0)
		cpu += p1.cpu - p0.cpu
		if os.Getenv("KUBEWIRE_BINARY_BENCH_THREADS") != "" {
			k.logThreads(b, p0, p1)
		}
		d, g := p1.switchesSince(p0)
		switches += float64(d)
		gone += g
		threads = len(p1.switches)
		events += ev1 - ev0
		writes += float64(w1 - w0)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(threads), "threads")
	b.ReportMetric(float64(gone), "threads-gone")
	if r.perSecond == 0 {
		// Idle: what the process costs with nothing to do, per second.
		b.ReportMetric(float64(cpu.Microseconds())/wall.Seconds(), "cpu-µs/s")
		b.ReportMetric(switches/wall.Seconds(), "ctxsw/s")
		b.ReportMetric(events, "events")
		b.Logf("RESULT %s: idle for %s, CPU %s, %.0f context switches, %d threads (%d gone)", b.Name(), wall.Round(time.Millisecond), cpu, switches, threads, gone)
		return
	}
	if events == 0 {
		b.Fatalf("no event was published in %s at %d writes/s (%.0f writes)\n%s", r.window, r.perSecond, writes, k.stderrTail())
	}
	if f := c.failed.Load(); f > 0 {
		b.Logf("%d writes failed; first error: %v", f, c.firstErr.Load())
	}
	b.ReportMetric(float64(cpu.Microseconds())/events, "cpu-µs/event")
	b.ReportMetric(switches/events, "ctxsw/event")
	b.ReportMetric(events/wall.Seconds(), "events/s")
	b.ReportMetric(writes/wall.Seconds(), "writes/s")
	b.Logf("RESULT %s: %.0f events in %s, CPU %s, %.0f context switches, %d threads (%d gone), %d writes skipped by the pacer",
		b.Name(), events, wall.Round(time.Millisecond), cpu, switches, threads, gone, c.skipped.Load())
}

// profile fetches a CPU profile of the next window from --profiling's
// listener into KUBEWIRE_BINARY_BENCH_PROFILE, named after the benchmark;
// the returned channel closes when it is written.
func (k *binaryProcess) profile(b *testing.B, window time.Duration) <-chan struct{} {
	done := make(chan struct{})
	path := filepath.Join(os.Getenv("KUBEWIRE_BINARY_BENCH_PROFILE"), strings.ReplaceAll(b.Name(), "/", "_")+".pprof")
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", k.pprof, int(window.Seconds()))
	go func() {
		defer close(done)
		resp, err := http.Get(url)
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Logf("profile: %v", err)
			return
		}
		b.Logf("profile of %s written to %s", b.Name(), path)
	}()
	return done
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// buildKubewireBinary builds cmd/kubewire once per test process, as `go
// build` does for a user, into a directory runMain removes at the end.
func buildKubewireBinary(b *testing.B) string {
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubewire-bench-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "kubewire")
		if out, err := exec.Command("go", "build", "-o", binaryPath, "../../cmd/kubewire").CombinedOutput(); err != nil {
			binaryErr = fmt.Errorf("build kubewire: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		b.Fatal(binaryErr)
	}
	return binaryPath
}

var (
	smallOnce sync.Once
	smallNS   string
	smallErr  error
)

// smallConfigMaps creates n small ConfigMaps (a label and two data keys of a
// few bytes) in a namespace of their own, once per test process, and
// returns the namespace.
func smallConfigMaps(b *testing.B, kube kubernetes.Interface, n int) string {
	smallOnce.Do(func() {
		ctx := context.Background()
		ns := "binary-bench"
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			smallErr = err
			return
		}
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n && failed.Load() == nil; i = int(next.Add(1)) - 1 {
					cm := &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{Name: configMapName(i), Labels: map[string]string{"app": "binary-bench"}},
						Data:       map[string]string{"owner": "team-" + strconv.Itoa(i%7), "n": "0"},
					}
					if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
						failed.Store(err)
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			smallErr = fmt.Errorf("creating ConfigMaps: %w", err)
		}
		smallNS = ns
	})
	if smallErr != nil {
		b.Fatal(smallErr)
	}
	return smallNS
}

func configMapName(i int) string { return fmt.Sprintf("cm-%05d", i) }

// churn patches ConfigMaps round-robin at a fixed rate: a ticker hands each
// write to a pool of writers, so one slow answer does not delay the next
// write. A tick that finds every writer busy is skipped and counted.
type churn struct {
	done, failed, skipped atomic.Int64
	firstErr              atomic.Value
	cancel                context.CancelFunc
	wg                    sync.WaitGroup
}

func startChurn(kube kubernetes.Interface, ns string, objects, perSecond int) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &churn{cancel: cancel}
	work := make(chan int, 64)
	cms := kube.CoreV1().ConfigMaps(ns)
	for range 8 {
		c.wg.Go(func() {
			for i := range work {
				patch := fmt.Sprintf(`{"data":{"n":%q}}`, strconv.Itoa(i))
				if _, err := cms.Patch(ctx, configMapName(i%objects), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					if ctx.Err() == nil && c.failed.Add(1) == 1 {
						c.firstErr.Store(err)
					}
					continue
				}
				c.done.Add(1)
			}
		})
	}
	c.wg.Go(func() {
		defer close(work)
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		// The counter runs on from the time, so successive rates write
		// new values and kubewire never suppresses an update as unchanged.
		for i := int(time.Now().UnixMilli() % 1e9); ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case work <- i:
			default:
				c.skipped.Add(1)
			}
		}
	})
	return c
}

func (c *churn) stop() {
	c.cancel()
	c.wg.Wait()
}

// startReceiver is a CloudEvents receiver that answers 200 at once to every
// request, in the test process. It returns its URL.
func startReceiver(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

func httpSinkYAML(url string) string {
	return `  - name: out
    type: http
    http: {url: "` + url + `"}`
}

// binaryBenchConfig is the config file for ns's ConfigMaps and one sink
// named out, with the spool in a directory of the run's own.
func binaryBenchConfig(b *testing.B, ns, sinkYAML string) string {
	return `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: bench
dispatch: {spoolDir: ` + filepath.Join(b.TempDir(), "spool") + `}
sinks:
` + sinkYAML + `
resources:
  - {version: v1, resource: configmaps, namespaces: [` + ns + `], sinks: [out]}
`
}

// binaryProcess is one `kubewire run` process.
type binaryProcess struct {
	cmd     *exec.Cmd
	metrics string
	stderr  *testkit.Buffer
	// pprof is the base URL of --profiling's listener, with
	// KUBEWIRE_BINARY_BENCH_PROFILE.
	pprof string
}

func startKubewireBinary(b *testing.B, bin, cfg string) *binaryProcess {
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, testcluster.AdminUser); err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(dir, "kubewire.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(b))
	cmd := exec.Command(bin, "run", "--config", config, "--kubeconfig", kubeconfig, "--http-address", addr)
	pprof := ""
	if os.Getenv("KUBEWIRE_BINARY_BENCH_PROFILE") != "" {
		paddr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(b))
		cmd.Args = append(cmd.Args, "--profiling="+paddr)
		pprof = "http://" + paddr
	}
	// The stdout sink writes to /dev/null: what is measured is kubewire,
	// not a disk or a reader at the other end of a pipe.
	cmd.Stdout = devNull
	k := &binaryProcess{cmd: cmd, metrics: "http://" + addr + "/metrics", stderr: &testkit.Buffer{}, pprof: pprof}
	cmd.Stderr = k.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		devNull.Close()
		if b.Failed() {
			b.Logf("kubewire stderr:\n%s", k.stderrTail())
		}
	})
	return k
}

func (k *binaryProcess) stderrTail() string {
	s := k.stderr.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// published is the sum of kubewire_events_published_total{sink="out"} over
// its resource and type labels.
func (k *binaryProcess) published() (float64, bool) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(k.metrics)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kubewire_events_published_total{") || !strings.Contains(line, `sink="out"`) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total, sc.Err() == nil
}

// logThreads logs each thread's context switches between p0 and p1 and the
// system call it sits in at p1 (/proc/<pid>/task/<tid>/syscall: 202 futex,
// 35 nanosleep, 281 epoll_pwait on amd64), which tells the runtime's
// threads apart: sysmon is the one that naps.
func (k *binaryProcess) logThreads(b *testing.B, p0, p1 procSample) {
	pid := k.cmd.Process.Pid
	for tid, v := range p1.switches {
		sc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, tid))
		call := "exited"
		if f := strings.Fields(string(sc)); len(f) > 0 {
			call = f[0]
		}
		b.Logf("THREAD %s: %d context switches, now in %s", tid, v-p0.switches[tid], call)
	}
}

// procSample is what /proc says of a process at one moment.
type procSample struct {
	cpu      time.Duration
	switches map[string]int64 // per thread id: voluntary + involuntary
}

// switchesSince is the number of context switches between s0 and s, over
// the threads alive at s (a thread new since s0 counts from zero), and how
// many of s0's threads had gone, whose switches since s0 are lost.
func (s procSample) switchesSince(s0 procSample) (n int64, gone int) {
	for tid, v := range s.switches {
		n += v - s0.switches[tid]
	}
	for tid := range s0.switches {
		if _, ok := s.switches[tid]; !ok {
			gone++
		}
	}
	return n, gone
}

func (k *binaryProcess) sample(b *testing.B) procSample {
	pid := k.cmd.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("kubewire exited? %v\n%s", err, k.stderrTail())
	}
	// After the command's closing parenthesis: state is field 3, utime 14
	// and stime 15 (proc(5)), in clock ticks.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	s := procSample{cpu: time.Duration(utime+stime) * time.Second / time.Duration(clockTicks()), switches: map[string]int64{}}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range tasks {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue // the thread exited since the listing
		}
		var n int64
		for _, line := range strings.Split(string(status), "\n") {
			for _, field := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if v, ok := strings.CutPrefix(line, field); ok {
					c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += c
				}
			}
		}
		s.switches[t.Name()] = n
	}
	return s
}

var (
	ticksOnce sync.Once
	ticks     int64
)

// clockTicks is the kernel's USER_HZ (getconf CLK_TCK), 100 on Linux
// unless getconf says otherwise.
func clockTicks() int64 {
	ticksOnce.Do(func() {
		ticks = 100
		if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
				ticks = n
			}
		}
	})
	return ticks
}
