package httpsink_test

import (
	"strings"
	"testing"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// The environment a Knative SinkBinding gives the pods it binds.

func TestAnHTTPSinkWithoutURLSendsToKSink(t *testing.T) {
	noKnativeEnv(t)
	rcv := startReceiver(t, receiverOptions{})
	path := freshPath()
	t.Setenv(httpsink.EnvSink, rcv.URL()+path)
	// The block may be omitted altogether.
	cfg, err := config.Parse([]byte(strings.Replace(httpBase, "    http:\n      url: https://receiver.ns.svc/events\n", "", 1)), app.DefaultRegistry())
	if err != nil {
		t.Fatalf("config without url, with K_SINK: %v", err)
	}
	s, err := app.DefaultRegistry().New(cfg.Sinks[0], sinks.Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := connect(t, s)
	if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := rcv.Events(path); len(got) != 1 {
		t.Fatalf("K_SINK's receiver holds %d events, want 1", len(got))
	}

	t.Setenv(httpsink.EnvSink, "")
	if _, err := app.DefaultRegistry().New(cfg.Sinks[0], sinks.Deps{}); err == nil || !strings.Contains(err.Error(), "K_SINK") {
		t.Fatalf("New without url and K_SINK = %v; want an error naming K_SINK", err)
	}
}

func TestKCEOverridesAddExtensionsInEveryContentMode(t *testing.T) {
	noKnativeEnv(t)
	t.Setenv(httpsink.EnvCEOverrides, `{"extensions": {"team": "shop", "env": "prod 1"}}`)
	rcv := startReceiver(t, receiverOptions{})
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured, httpsink.ContentModeBatched} {
		t.Run(mode, func(t *testing.T) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, ContentMode: mode})
			ctx := connect(t, s)
			sent := []*encoding.Event{mustEvent(t, change("a", 1)), mustEvent(t, change("a", 2))}
			if err := s.Write(ctx, sent); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got := rcv.Events(path)
			if len(got) != len(sent) {
				t.Fatalf("received %d events, want %d", len(got), len(sent))
			}
			env := "prod 1"
			if mode == config.ContentModeBinary {
				env = "prod%201" // percent-encoded in the header; sdk-go does not decode it
			}
			for i, ev := range got {
				ext := ev.Extensions()
				if ext["team"] != "shop" || ext["env"] != env || ext["partitionkey"] != sent[i].Extensions()["partitionkey"] {
					t.Errorf("event %d arrived with extensions %v", i, ext)
				}
			}
			if _, has := sent[0].Extensions()["team"]; has {
				t.Error("the overrides changed the caller's event, which other sinks share")
			}
		})
	}
}

func TestAnOverrideThatWouldReplaceTheContractIsRefusedByNew(t *testing.T) {
	noKnativeEnv(t)
	t.Setenv(httpsink.EnvCEOverrides, `{"extensions": {"partitionkey": "one-for-all"}}`)
	_, err := httpsink.New("h", &httpsink.Config{URL: "http://receiver/"}, sinks.Deps{})
	if err == nil || !strings.Contains(err.Error(), "K_CE_OVERRIDES") {
		t.Fatalf("New = %v; want the override refused", err)
	}
}
