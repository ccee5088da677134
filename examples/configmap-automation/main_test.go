package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/natstest"
	"github.com/kubewire/kubewire/internal/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
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

func TestTheAutomationsInformerHandlerReactsToConfigMapChangesFromJetStream(t *testing.T) {
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
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	send := func(changes ...*informer.Change) {
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
	// Before the automation starts: one ConfigMap it lists, not an add.
	send(configMap(informer.OpAdded, "existing", 1, map[string]any{"x": "1"}))

	var out testkit.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	synced := make(chan struct{})
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- run(runCtx, srv.ClientURL(), "KUBEWIRE", log, func() { close(synced) }) }()
	select {
	case <-synced:
	case err := <-done:
		t.Fatalf("the automation stopped before its informer synced: %v", err)
	}
	send(
		configMap(informer.OpAdded, "web", 2, map[string]any{"a": "1"}),
		configMap(informer.OpUpdated, "web", 3, map[string]any{"a": "2", "b": "3"}),
		configMap(informer.OpDeleted, "web", 4, map[string]any{"a": "2", "b": "3"}),
	)
	testkit.Eventually(t, "the delete to be logged", func() bool { return strings.Contains(out.String(), "configmap deleted") })
	stop()
	if err := <-done; err != nil && err != context.Canceled {
		t.Errorf("run: %v", err)
	}
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
