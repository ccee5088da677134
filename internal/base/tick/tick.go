// Package tick runs a function at a fixed interval until a context ends:
// the periodic snapshots, checkpoint and position saves, and connection
// probes.
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
