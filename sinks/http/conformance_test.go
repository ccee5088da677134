package httpsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// maxBody is the receiver's body limit in the conformance suite: the
// oversize cases need one, and a real receiver behind a proxy has one.
const maxBody = 256 << 10

// harness gives each case its own request path on one receiver, which the
// restart case restarts.
func harness(t *testing.T, mode string) sinktest.Harness {
	rcv := startReceiver(t, receiverOptions{MaxBody: maxBody})
	return sinktest.Harness{
		New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, ContentMode: mode})
			return s, func(context.Context, *testing.T) []*event.Event { return rcv.Events(path) }
		},
		Restart:       rcv.Restart,
		Timeout:       30 * time.Second,
		OversizeBytes: maxBody,
	}
}

func TestEachContentModePassesTheConformanceSuiteIncludingAReceiverRestart(t *testing.T) {
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured, httpsink.ContentModeBatched} {
		t.Run(mode, func(t *testing.T) { sinktest.Run(t, harness(t, mode)) })
	}
}
