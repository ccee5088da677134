package sinktest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// TestACorrectSinkPassesTheSuite is the suite's own check that a correct
// sink passes it, without a network: an in-memory sink whose broker refuses,
// for good, any event over 1 MiB.
func TestACorrectSinkPassesTheSuite(t *testing.T) {
	var mu sync.Mutex
	var all []*memsink.Sink
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			s := &memsink.Sink{}
			s.RefuseOver(1 << 20)
			mu.Lock()
			all = append(all, s)
			mu.Unlock()
			return s, func(context.Context, *testing.T) []*event.Event { return sinktest.CloudEvents(s.Events()) }
		},
		// The nodes' destination is missing until healed: memsink fails
		// their events alone, as a broker answers for each event.
		Partial: func(t *testing.T) (sinks.Sink, sinktest.Reader, func(*testing.T)) {
			s := &memsink.Sink{}
			s.RefuseOver(1 << 20)
			var blocked atomic.Bool
			blocked.Store(true)
			s.FailEach(func(ev *encoding.Event) error {
				if k, _ := ev.Extensions()["partitionkey"].(string); blocked.Load() && strings.HasPrefix(k, sinktest.ClusterResource.KeyPrefix+"/") {
					return fmt.Errorf("no topic for %s: %w", k, memsink.ErrDown)
				}
				return nil
			})
			return s, func(context.Context, *testing.T) []*event.Event { return sinktest.CloudEvents(s.Events()) }, func(*testing.T) { blocked.Store(false) }
		},
		// A restart here is only a blink of an outage; an adapter's own suite run
		// against its real broker is the real test of restarts.
		Restart: func(t *testing.T) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range all {
				s.SetDown(true)
			}
			for _, s := range all {
				s.SetDown(false)
			}
		},
	})
}
