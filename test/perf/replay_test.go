package perf

import (
	"os"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

func init() {
	// The replay's child process is this test binary run again. An init
	// runs before whichever TestMain the build tags select (the bench
	// tag's starts a kube-apiserver), so the child serves and exits before
	// anything heavy, in every build.
	benchdata.ServeReplayChild()
}

// replayEnv chooses where the pipeline benchmarks' replayed apiserver runs:
// unset, in this process (benchdata.Replay); "process", in a child process
// (benchdata.ReplayProcess), so that cpu-µs/event is kubewire's alone, as
// in production where the apiserver is a process of its own.
const replayEnv = "KUBEWIRE_BENCH_REPLAY"

// replayServer is what the benchmarks use of a replayed apiserver, in this
// process or a child.
type replayServer interface {
	URL() string
	FrameBytes() int
	Play(n int)
	Ack(n int)
	Close()
}

// replayInChild reports whether KUBEWIRE_BENCH_REPLAY asks for the replay
// in a child process.
func replayInChild(tb testing.TB) bool {
	switch v := os.Getenv(replayEnv); v {
	case "":
		return false
	case "process":
		return true
	default:
		tb.Fatalf("%s=%q: want process, or unset for the replay in this process", replayEnv, v)
		return false
	}
}

// newReplay is benchdata.NewReplay, in this process or a child as
// KUBEWIRE_BENCH_REPLAY says.
func newReplay(tb testing.TB, k benchdata.Kind, seed uint64, objects, window int) replayServer {
	tb.Helper()
	if !replayInChild(tb) {
		return benchdata.NewReplay(k, seed, objects, window)
	}
	p, err := benchdata.StartReplayProcess(k, seed, objects, window)
	if err != nil {
		tb.Fatal(err)
	}
	r := &childReplay{ReplayProcess: p, tb: tb}
	// The callers close it when they return; this also stops the child
	// if one of them fails before it has deferred Close.
	tb.Cleanup(r.Close)
	return r
}

// childReplay reports what went wrong with the child to the benchmark.
type childReplay struct {
	*benchdata.ReplayProcess
	tb testing.TB
}

func (r *childReplay) Close() {
	if err := r.ReplayProcess.Close(); err != nil {
		r.tb.Error(err)
	}
}

// replayCPU measures the CPU time of the replays that run in child
// processes, which cpuTime does not see.
type replayCPU struct {
	children []*childReplay
	start    time.Duration
}

// startReplayCPU starts measuring the CPU time of those of rs that are
// child processes.
func startReplayCPU(tb testing.TB, rs ...replayServer) *replayCPU {
	c := &replayCPU{}
	for _, r := range rs {
		if cr, ok := r.(*childReplay); ok {
			c.children = append(c.children, cr)
		}
	}
	c.start = c.total(tb)
	return c
}

func (c *replayCPU) total(tb testing.TB) time.Duration {
	var sum time.Duration
	for _, r := range c.children {
		cpu, err := r.CPU()
		if err != nil {
			tb.Fatal(err)
		}
		sum += cpu
	}
	return sum
}

// report reports the children's CPU time per event as
// replay-cpu-µs/event, which cpu-µs/event then leaves out; the metric
// appears only when the replay ran in a child, so it also says which one
// ran. With the replay in this process cpu-µs/event includes it.
func (c *replayCPU) report(b *testing.B) {
	if len(c.children) == 0 {
		return
	}
	b.ReportMetric(float64((c.total(b)-c.start).Microseconds())/float64(b.N), "replay-cpu-µs/event")
}
