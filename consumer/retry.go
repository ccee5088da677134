package consumer

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/internal/base/tick"
)

// DefaultMaxBackoff is the longest a source waits between two attempts to
// read, unless its config sets MaxBackoff.
const DefaultMaxBackoff = 30 * time.Second

// minBackoff is the wait after the first failure; it doubles with each
// failure in a row, up to the max.
const minBackoff = 250 * time.Millisecond

// retrier spaces a source's attempts to read, and reports each failure.
type retrier struct {
	what    string // "topic <t>" or "stream <s>", for the default report
	onError func(error, time.Duration)
	max     time.Duration
	fails   int // failures in a row
}

func newRetrier(what string, onError func(error, time.Duration), max time.Duration) *retrier {
	if max <= 0 {
		max = DefaultMaxBackoff
	}
	return &retrier{what: what, onError: onError, max: max}
}

// run calls attempt until ctx ends, and then returns ctx's error. After an
// attempt that failed, it waits (wait) before the next one; an attempt that
// moved read, the count of messages the source handled, made progress.
func (r *retrier) run(ctx context.Context, read *atomic.Int64, attempt func(context.Context) error) error {
	for {
		before := read.Load()
		err := attempt(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if werr := r.wait(ctx, err, read.Load() != before); werr != nil {
			return werr
		}
	}
}

// wait reports err and waits before the next attempt; an attempt that read
// something starts the backoff over. It returns ctx's error if ctx ends
// first.
func (r *retrier) wait(ctx context.Context, err error, progressed bool) error {
	if progressed {
		r.fails = 0
	}
	d := r.max
	if r.fails < 16 && minBackoff<<r.fails < r.max {
		d = minBackoff << r.fails
	}
	r.fails++
	r.report(err, d)
	if !tick.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// report passes a failure to the hook, or without one logs it: a source
// that retries silently would look like an idle one.
func (r *retrier) report(err error, retryIn time.Duration) {
	if r.onError != nil {
		r.onError(err, retryIn)
		return
	}
	slog.Warn("consumer: reading failed; retrying", "source", r.what, "err", err, "retryIn", retryIn)
}

// startAt records that a source starts reading partition at offset, so that
// Position returns it before anything is read there: a position saved and
// started from comes back unchanged. A position the View is already past
// stays.
func (v *View) startAt(partition string, offset int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.pos[partition]; !ok || offset > cur {
		v.pos[v.interned(partition)] = offset
	}
}

// positionOf returns the View's position in one partition.
func (v *View) positionOf(partition string) (int64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	o, ok := v.pos[partition]
	return o, ok
}
