package perf

import "syscall"

// contextSwitches is how many times this process's threads have given up
// the CPU so far, voluntarily (to sleep or wait: a goroutine hand-off that
// found every other thread idle ends in one) or not. It counts wake-ups
// about as the kernel sees them, and unlike CPU time it hardly moves with
// the load of other processes on the machine.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}
