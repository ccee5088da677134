// Package tick waits on the clock for as long as a context lasts: Every
// runs a function at a fixed interval (the periodic snapshots, checkpoint
// and position saves, connection probes), Sleep pauses once (the backoffs
// between retries).
package tick

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, the first time one interval
// after it is called. Calls never overlap: as with time.Ticker, ticks that
// come while f runs are dropped, but for one that waits.
func Every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Sleep waits for d, or until ctx ends, and reports whether d passed first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
