package procs

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

func TestOneProcIsUsedWhileTheLoadIsLowAndTheDefaultOnceItIsHigh(t *testing.T) {
	for _, c := range []struct {
		cur   int
		cores float64
		want  int
	}{
		{4, 0.05, 1}, // idle: one P
		{4, 0.3, 4},  // moderate load stays where it is
		{1, 0.3, 1},  // ... either way
		{1, 0.69, 1}, // one P keeps up
		{1, 0.95, 4}, // one P is kept busy: the default
		{4, 1.6, 4},  // busy
		{4, 0.24, 1}, // the burst is over
	} {
		if got := next(c.cur, 4, c.cores); got != c.want {
			t.Errorf("next(%d, 4, %.2f) = %d, want %d", c.cur, c.cores, got, c.want)
		}
	}
}

// fakeRuntime plays a script of CPU time used per tick and records every
// change of GOMAXPROCS.
type fakeRuntime struct {
	mu         sync.Mutex
	procs, def int
	cpu        time.Duration
	changes    []int
}

func (f *fakeRuntime) use(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu += d
}

func (f *fakeRuntime) procsOf() runtimeProcs {
	locked := func(fn func()) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fn()
	}
	return runtimeProcs{
		cpu: func() (d time.Duration) { locked(func() { d = f.cpu }); return d },
		get: func() (n int) { locked(func() { n = f.procs }); return n },
		set: func(n int) { locked(func() { f.procs = n; f.changes = append(f.changes, n) }) },
		setDefault: func() {
			locked(func() { f.procs = f.def; f.changes = append(f.changes, f.def) })
		},
	}
}

func TestAdaptFollowsTheLoadAndLeavesTheDefaultWhenItStops(t *testing.T) {
	f := &fakeRuntime{procs: 2, def: 2, cpu: time.Second}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		adapt(ctx, slog.New(slog.DiscardHandler), f.procsOf(), tick)
	}()
	now := time.Now()
	// Each tick is one second later; the CPU used in that second is the
	// load. A send on the unbuffered tick returns only once adapt has
	// finished with the one before. (Whether adapt's first reading comes
	// before or after the first load changes nothing: both are idle.)
	for _, load := range []time.Duration{
		50 * time.Millisecond,  // idle: down to one P
		100 * time.Millisecond, // still idle
		900 * time.Millisecond, // one P kept busy: back to the default
		500 * time.Millisecond, // moderate: stays
		100 * time.Millisecond, // idle again: one P
	} {
		now = now.Add(time.Second)
		f.use(load)
		tick <- now
	}
	cancel()
	testkit.Within(t, 5*time.Second, "adapt to return after its context ends", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int{1, 2, 1, 2}; !slices.Equal(f.changes, want) {
		t.Errorf("GOMAXPROCS went %v, want %v (the last: the default, once adapt stops)", f.changes, want)
	}
}

func TestGOMAXPROCSFromTheEnvironmentIsLeftAlone(t *testing.T) {
	t.Setenv("GOMAXPROCS", "3")
	done := make(chan struct{})
	go func() {
		defer close(done)
		Adapt(context.Background(), slog.New(slog.DiscardHandler))
	}()
	testkit.Within(t, 5*time.Second, "Adapt to return at once when GOMAXPROCS is set", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}
