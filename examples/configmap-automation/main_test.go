package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var configMaps = informer.NewResource("demo", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)

func configMap(op informer.Op, name string, rv int, data map[string]any) *informer.Change {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}}
	u.SetNamespace("team-a")
	u.SetName(name)
	u.SetUID(k8stypes.UID("uid-" + name))
	u.SetResourceVersion(strconv.Itoa(rv))
	return &informer.Change{Op: op, Resource: configMaps, Key: configMaps.ObjectKey("team-a", name), Object: informer.FromUnstructured(u), Observed: time.Now()}
}

// kubewireStream starts a nats-server and kubewire's JetStream sink on it,
// writing to the stream KUBEWIRE, and returns the server's URL and a func
// that writes changes through the sink.
func kubewireStream(t *testing.T) (string, func(...*informer.Change)) {
	t.Helper()
	srv := natstest.Embedded(t)

	c := &config.Config{
		APIVersion: config.APIVersion, Kind: config.Kind, Cluster: "demo",
		Resources: []config.Resource{{Version: "v1", Resource: "configmaps", Sinks: []string{"js"}}},
		Sinks: []config.Sink{{Name: "js", Type: kwnats.Type, Block: &kwnats.Config{
			Mode: kwnats.ModeJetStream, Servers: []string{srv.ClientURL()},
			JetStream: &kwnats.JetStream{Stream: &kwnats.Stream{Name: "KUBEWIRE"}},
		}}},
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := kwnats.Spec.New(c.Sinks[0].Name, c.Sinks[0].Block, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return srv.ClientURL(), func(changes ...*informer.Change) {
		t.Helper()
		for _, ch := range changes {
			ev, err := encoding.New(ch)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// logger logs without times, so that lines can be compared.
func logger(out io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

// automation runs the automation until the returned stop is called.
func automation(t *testing.T, url, state string, out io.Writer) (stop func()) {
	t.Helper()
	synced := make(chan struct{})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- run(ctx, url, "KUBEWIRE", state, logger(out), func() { close(synced) }) }()
	select {
	case <-synced:
	case err := <-done:
		cancel()
		t.Fatalf("the automation stopped before its informer synced: %v", err)
	}
	return func() {
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("run: %v", err)
		}
	}
}

func TestTheAutomationsInformerHandlerReactsToConfigMapChangesFromJetStream(t *testing.T) {
	url, send := kubewireStream(t)
	// Before the automation starts: one ConfigMap it lists, not an add.
	send(configMap(informer.OpAdded, "existing", 1, map[string]any{"x": "1"}))

	var out testkit.Buffer
	stop := automation(t, url, "", &out)
	send(
		configMap(informer.OpAdded, "web", 2, map[string]any{"a": "1"}),
		configMap(informer.OpUpdated, "web", 3, map[string]any{"a": "2", "b": "3"}),
		configMap(informer.OpDeleted, "web", 4, map[string]any{"a": "2", "b": "3"}),
	)
	testkit.Eventually(t, "the delete to be logged", func() bool { return strings.Contains(out.String(), "configmap deleted") })
	stop()
	want := []string{
		`level=INFO msg="informer synced" configmaps=1`,
		`level=INFO msg="configmap added" key=team-a/web keys=[a]`,
		`level=INFO msg="configmap changed" key=team-a/web changed="[a b]" resourceVersion=3`,
		`level=INFO msg="configmap deleted" key=team-a/web`,
	}
	if got := strings.TrimSpace(out.String()); got != strings.Join(want, "\n") {
		t.Errorf("the automation logged\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}

// Restarted from its state file, the automation holds every ConfigMap, as of
// where it stopped plus what the stream holds since, although the stream no
// longer keeps the events it read before.
func TestTheAutomationRestartsFromItsStateAfterTheStreamDroppedWhatItRead(t *testing.T) {
	url, send := kubewireStream(t)
	state := filepath.Join(t.TempDir(), "cm.state")
	send(configMap(informer.OpAdded, "a", 1, map[string]any{"x": "1"}), configMap(informer.OpAdded, "b", 2, map[string]any{"x": "1"}))
	var first testkit.Buffer
	stop := automation(t, url, state, &first)
	send(configMap(informer.OpAdded, "c", 3, map[string]any{"x": "1"}))
	testkit.Eventually(t, "the add of c to be logged", func() bool { return strings.Contains(first.String(), "key=team-a/c") })
	stop()

	// While it is stopped: retention drops everything it read, and the
	// cluster changes.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KUBEWIRE")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	send(configMap(informer.OpUpdated, "a", 4, map[string]any{"x": "2"}), configMap(informer.OpDeleted, "b", 5, map[string]any{"x": "1"}))

	var second testkit.Buffer
	stop = automation(t, url, state, &second)
	send(configMap(informer.OpUpdated, "c", 6, map[string]any{"x": "2"}))
	testkit.Eventually(t, "the change of c to be logged", func() bool { return strings.Contains(second.String(), "key=team-a/c") },
		func() string { return "logged:\n" + second.String() })
	stop()
	// It lists a (as changed while it was stopped) and c: without the
	// state it would hold a alone, and take c's update for an add.
	want := []string{
		`level=INFO msg="informer synced" configmaps=2`,
		`level=INFO msg="configmap changed" key=team-a/c changed=[x] resourceVersion=6`,
	}
	if got := strings.TrimSpace(second.String()); got != strings.Join(want, "\n") {
		t.Errorf("restarted from its state, the automation logged\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}
