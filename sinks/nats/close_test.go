package nats_test

import (
	"context"
	"testing"
	"time"

	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// With the server gone, a client that has nothing buffered has nothing to
// flush: closing it is clean, not an error that waits out its deadline.
func TestClosingWithTheServerDownAndNothingBufferedIsClean(t *testing.T) {
	for _, mode := range []string{kwnats.ModeCore, kwnats.ModeJetStream} {
		t.Run(mode, func(t *testing.T) {
			b := startBroker(t)
			s := newSink(t, "close-down-"+mode, b.sinkConfig(mode))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			b.Stop(t)
			closeCtx, cancelClose := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancelClose()
			if err := s.Close(closeCtx); err != nil {
				t.Errorf("Close with the server down and nothing undelivered = %v, want nil", err)
			}
		})
	}
}
