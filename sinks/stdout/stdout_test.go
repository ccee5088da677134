package stdout_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testkit"
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

// An event whose data claims to be JSON but is not cannot be written as a
// JSON line: it is refused alone, and the events around it are written.
func TestAnEventThatCannotBeMarshalledIsRefusedAloneAndTheRestIsWritten(t *testing.T) {
	var out testkit.Buffer
	s, err := stdout.New("stdout", &stdout.Config{}, sinks.Deps{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id, data string) *encoding.Event {
		e := event.New()
		e.SetID(id)
		e.SetSource("/test")
		e.SetType("test")
		e.SetDataContentType("application/json")
		e.DataEncoded = []byte(data)
		return sinktest.FromCloudEvent(t, &e)
	}
	err = s.Write(context.Background(), []*encoding.Event{ev("before", `{}`), ev("broken", `{not json`), ev("after", `{}`)})
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Failures() != 1 || !errors.Is(be.Err(1), sinks.ErrPermanent) {
		t.Fatalf("Write = %v; want a BatchError refusing the broken event alone", err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		ids = append(ids, m["id"].(string))
	}
	if got := strings.Join(ids, ","); got != "before,after" {
		t.Errorf("wrote %s, want before,after", got)
	}
}
