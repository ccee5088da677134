// Package apptest runs kubewire in-process for tests, captures what the
// stdout sink writes, and polls it with deadlines.
package apptest

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// Kubewire is one in-process run of the app with its stdout sink and logs
// captured.
type Kubewire struct {
	App  *app.App
	Out  testkit.Buffer
	Logs testkit.Buffer

	stop context.CancelFunc
	done chan struct{}
	// Undelivered is what Run reported, once it returned.
	Undelivered int
}

// Start runs kubewire with cfgYAML against rc until the test ends.
func Start(t *testing.T, cfgYAML string, rc *rest.Config) *Kubewire {
	t.Helper()
	return StartWith(t, cfgYAML, rc, nil)
}

// StartWith is Start with options that edit sets (a checkpoint store, say).
func StartWith(t *testing.T, cfgYAML string, rc *rest.Config, edit func(*app.Options)) *Kubewire {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML), app.DefaultRegistry())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if cfg.Dispatch.SpoolDir == config.DefaultSpoolDir {
		// Each run spools into its own directory, never a shared one.
		cfg.Dispatch.SpoolDir = t.TempDir()
	}
	k := &Kubewire{done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(&k.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := app.Options{Config: cfg, REST: rc, Logger: log, Stdout: &k.Out}
	if edit != nil {
		edit(&opts)
	}
	a, err := app.New(opts)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	k.App = a
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	go func() {
		defer close(k.done)
		k.Undelivered, _ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		k.Shutdown(t)
		if t.Failed() {
			t.Logf("kubewire logs:\n%s", k.Logs.String())
		}
	})
	return k
}

// Shutdown stops kubewire as a signal would and waits for the drain.
func (k *Kubewire) Shutdown(t *testing.T) {
	t.Helper()
	k.stop()
	select {
	case <-k.done:
	case <-time.After(60 * time.Second):
		t.Fatal("kubewire did not stop within 60s")
	}
}

// Events parses what the stdout sink wrote.
func (k *Kubewire) Events(t *testing.T) []event.Event {
	t.Helper()
	return Parse(t, k.Out.String())
}

// Parse reads one structured CloudEvent per line. A last line without its
// newline (a process killed mid-write) is ignored.
func Parse(t *testing.T, out string) []event.Event {
	t.Helper()
	var evs []event.Event
	lines := strings.Split(out, "\n")
	for _, line := range lines[:len(lines)-1] {
		if line == "" {
			continue
		}
		var ev event.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stdout line is not a CloudEvent: %v\n%s", err, line)
		}
		evs = append(evs, ev)
	}
	return evs
}

// WaitFor polls the output until cond holds, failing after a minute.
func (k *Kubewire) WaitFor(t *testing.T, what string, cond func([]event.Event) bool) []event.Event {
	t.Helper()
	var evs []event.Event
	testkit.Eventually(t, what, func() bool {
		evs = k.Events(t)
		return cond(evs)
	})
	return evs
}

// WaitLog polls the logs for a line containing every part and returns it.
func (k *Kubewire) WaitLog(t *testing.T, parts ...string) string {
	t.Helper()
	var found string
	testkit.Eventually(t, "a log line with "+strings.Join(parts, ", "), func() bool {
		for _, line := range strings.Split(k.Logs.String(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				found = line
				return true
			}
		}
		return false
	})
	return found
}

// Ext returns a string extension of ev.
func Ext(ev event.Event, name string) string {
	v, _ := ev.Extensions()[name].(string)
	return v
}

// CountCompleted counts snapshot.completed markers of a resource prefix.
func CountCompleted(evs []event.Event, resource string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type() == encoding.TypeSnapshotCompleted && Ext(ev, encoding.ExtPartitionKey) == resource {
			n++
		}
	}
	return n
}

// ByKey groups object events (not markers) by partition key.
func ByKey(evs []event.Event) map[string][]event.Event {
	m := map[string][]event.Event{}
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type(), encoding.TypePrefix+"object.") {
			k := Ext(ev, encoding.ExtPartitionKey)
			m[k] = append(m[k], ev)
		}
	}
	return m
}
