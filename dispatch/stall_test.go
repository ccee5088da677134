package dispatch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
)

// unreachable is a sink whose broker never answers.
type unreachable struct{ memsink.Sink }

func (u *unreachable) Connect(context.Context) error {
	return errors.New("dial tcp: connection refused")
}

func TestCloseReturnsAtOnceWhenNothingIsQueuedEvenIfTheBrokerIsDown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spool bool
	}{
		{"Without a spool.", false},
		{"With a spool.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d *dispatch.Dispatcher
			if tc.spool {
				d = spooled(t, "down", brokerDown(), t.TempDir(), 1<<30)
			} else {
				d = dispatch.NewDispatcher("down", &unreachable{}, fastOptions())
			}
			d.Start()
			// The drain deadline a SIGTERM gives: 30 s by default.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			if n := d.Close(ctx); n != 0 {
				t.Fatalf("Close reported %d undelivered with nothing queued", n)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Close took %s with nothing queued, waiting for a broker that is down", took)
			}
		})
	}
}

func TestACleanCloseLogsNothingAtError(t *testing.T) {
	var buf testkit.Buffer
	opt := fastOptions()
	opt.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rec := &memsink.Sink{}
	d := dispatch.NewDispatcher("clean", rec, opt)
	d.Start()
	d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm", 1)))
	testkit.Eventually(t, "the event", func() bool { return len(rec.Events()) == 1 })
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if logs := buf.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("a clean close logged at ERROR:\n%s", logs)
	}
}
