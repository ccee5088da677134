package stdout_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
	"github.com/kubewire/kubewire/sinks/stdout"
)

// harness writes each case into its own buffer and reads it back as a
// stream of JSON CloudEvents, one a line or pretty-printed.
func harness(pretty bool) sinktest.Harness {
	return sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			var out testkit.Buffer
			s, err := stdout.New("stdout", &stdout.Config{Pretty: pretty}, sinks.Deps{Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			return s, func(_ context.Context, t *testing.T) []*event.Event {
				var evs []*event.Event
				dec := json.NewDecoder(strings.NewReader(out.String()))
				for {
					ev := &event.Event{}
					err := dec.Decode(ev)
					if errors.Is(err, io.EOF) {
						return evs
					}
					if err != nil {
						t.Fatalf("stdout holds something that is not a CloudEvent: %v", err)
					}
					evs = append(evs, ev)
				}
			}
		},
		// Stdout takes lines of any length.
		OversizeBytes: -1,
	}
}

func TestTheStdoutSinkPassesTheConformanceSuiteInBothLayouts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pretty bool
	}{
		{"One event a line.", false},
		{"Pretty-printed.", true},
	} {
		t.Run(tc.name, func(t *testing.T) { sinktest.Run(t, harness(tc.pretty)) })
	}
}
