package sinktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// memBroker is an in-memory broker: the suite's own check that a correct
// sink passes it, without a network.
type memBroker struct {
	mu     sync.Mutex
	topics map[int][]*event.Event
	down   bool
}

type memSink struct {
	b     *memBroker
	topic int
}

var errDown = errors.New("broker down")

func (s *memSink) Connect(context.Context) error { return nil }
func (s *memSink) Close(context.Context) error   { return nil }
func (s *memSink) Write(_ context.Context, evs []*event.Event) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.b.down {
		return errDown
	}
	s.b.topics[s.topic] = append(s.b.topics[s.topic], evs...)
	return nil
}

func TestACorrectSinkPassesTheSuite(t *testing.T) {
	b := &memBroker{topics: map[int][]*event.Event{}}
	n := 0
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			b.mu.Lock()
			n++
			topic := n
			b.mu.Unlock()
			return &memSink{b: b, topic: topic}, func(context.Context, *testing.T) []*event.Event {
				b.mu.Lock()
				defer b.mu.Unlock()
				return append([]*event.Event(nil), b.topics[topic]...)
			}
		},
		// A restart here is only a blink of an outage; an adapter's own suite run
		// against its real broker is the real test of restarts.
		Restart: func(t *testing.T) {
			b.mu.Lock()
			b.down = true
			b.mu.Unlock()
			b.mu.Lock()
			b.down = false
			b.mu.Unlock()
		},
	})
}
