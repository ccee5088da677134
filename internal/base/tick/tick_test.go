package tick_test

import (
	"context"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/tick"
)

func TestEveryCallsTheFunctionEachIntervalUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	tick.Every(ctx, time.Millisecond, func() {
		calls++
		if calls == 3 {
			cancel()
		}
	})
	if calls != 3 {
		t.Fatalf("f ran %d times; want 3, and none after the context ended", calls)
	}
}

func TestEveryReturnsAtOnceForAnEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tick.Every(ctx, time.Hour, func() { t.Error("f ran after the context ended") })
}

func TestSleepReportsWhetherTheDurationPassedBeforeTheContextEnded(t *testing.T) {
	if !tick.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of 1ms with a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if tick.Sleep(ctx, time.Hour) {
		t.Error("Sleep of an hour with an ended context reported true")
	}
}
