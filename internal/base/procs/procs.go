// Package procs adapts GOMAXPROCS to how busy the process is.
//
// At a cluster's usual rate of changes, a few hundred a second, every event
// wakes several goroutines on its own, and with more than one P each wake-up
// also wakes an idle thread that spins looking for work. That costs more
// CPU than the events themselves: the paced pipeline benchmarks spend about
// twice the CPU per event with GOMAXPROCS=2 as with 1. Under load, more Ps
// are what lets the decode, the dispatch and the brokers' clients run in
// parallel. So kubewire runs on one P while it uses little CPU, and goes
// back to the runtime's default (which follows the container's CPU limit)
// as soon as one P is kept busy.
//
// GOMAXPROCS set in the environment is the operator's choice and is left
// alone.
package procs

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"
)

const (
	// Interval is how often the load is looked at.
	Interval = time.Second
	// raiseAbove is the share of one core above which one P is too few:
	// the work queues behind it.
	raiseAbove = 0.7
	// lowerBelow is the share of one core below which one P is enough.
	// Far from raiseAbove, so that a steady load does not switch back and
	// forth.
	lowerBelow = 0.25
)

// runtimeProcs is what Adapt reads and changes: the runtime's, except in
// tests.
type runtimeProcs struct {
	cpu        func() time.Duration // CPU time the process used so far
	get        func() int
	set        func(int)
	setDefault func()
}

var goRuntime = runtimeProcs{
	cpu: cpuTime,
	get: func() int { return runtime.GOMAXPROCS(0) },
	set: func(n int) { runtime.GOMAXPROCS(n) },
	// SetDefaultGOMAXPROCS, unlike GOMAXPROCS(n), leaves the runtime free
	// to follow a changed CPU limit of the container.
	setDefault: runtime.SetDefaultGOMAXPROCS,
}

// Adapt adjusts GOMAXPROCS every Interval until ctx ends, and then leaves
// it at the runtime's default. It returns at once when the environment
// sets GOMAXPROCS or the default is 1 already.
func Adapt(ctx context.Context, log *slog.Logger) {
	if os.Getenv("GOMAXPROCS") != "" {
		log.Debug("GOMAXPROCS is set in the environment; kubewire does not adapt it")
		return
	}
	adapt(ctx, log, goRuntime, time.NewTicker(Interval).C)
}

func adapt(ctx context.Context, log *slog.Logger, rt runtimeProcs, tick <-chan time.Time) {
	def := rt.get()
	last, lastCPU := time.Now(), rt.cpu()
	if def <= 1 || lastCPU == 0 {
		return // nothing to adapt, or no way to see the load
	}
	defer rt.setDefault()
	cur := def
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			used := rt.cpu()
			cores := float64(used-lastCPU) / float64(now.Sub(last))
			last, lastCPU = now, used
			switch n := next(cur, def, cores); {
			case n == cur:
			case n == 1:
				rt.set(1)
				log.Debug("one P is enough for the load", "gomaxprocs", 1, "cores", cores)
				cur = 1
			default:
				rt.setDefault()
				cur = rt.get()
				log.Debug("the load needs more than one P", "gomaxprocs", cur, "cores", cores)
			}
		}
	}
}

// next is the GOMAXPROCS to run with, given the current one, the runtime's
// default and the cores used over the last interval.
func next(cur, def int, cores float64) int {
	switch {
	case cur == 1 && cores > raiseAbove:
		return def
	case cur > 1 && cores < lowerBelow:
		return 1
	}
	return cur
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
