package examples_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// python returns an interpreter that has the Python example's packages:
// $KUBEWIRE_PYTHON, the venv .ci/run installs them into, or python3. Without
// one the test is skipped, except in CI (CI=true), where it fails.
func python(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p := os.Getenv("KUBEWIRE_PYTHON"); p != "" {
		candidates = append(candidates, p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".cache", "kubewire", "venv", "bin", "python3"))
	}
	candidates = append(candidates, "python3")
	var why []string
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			why = append(why, c+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "import cloudevents, kafka, nats").CombinedOutput()
		if err == nil {
			return path
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		why = append(why, fmt.Sprintf("%s: %s", path, lines[len(lines)-1]))
	}
	msg := "no python3 with the packages of examples/python-consumer/requirements.txt (" + strings.Join(why, "; ") +
		"); install them with: pip install -r examples/python-consumer/requirements.txt"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// consume runs the Python example with args until it printed --count
// events, and returns its lines.
func consume(t *testing.T, py string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("python-consumer", "consume.py")}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("consume.py %v did not stop within a minute; stdout:\n%s\nstderr:\n%s", args, out, stderr.String())
	}
	if err != nil {
		t.Fatalf("consume.py %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func changes() []*informer.Change {
	c := sinktest.Change
	return []*informer.Change{c(informer.OpAdded, "team-a", "a", 1), c(informer.OpUpdated, "team-a", "a", 2), c(informer.OpDeleted, "team-a", "a", 3)}
}

// want is what consume.py prints for changes().
func want(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, c := range changes() {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		rv, _ := ev.Extensions()[encoding.ExtResourceVersion].(string)
		out = append(out, fmt.Sprintf("%s %s rv=%s id=%s", ev.Type(), c.Key, rv, ev.ID()))
	}
	return out
}

func connect(t *testing.T, s sinks.Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
}

func send(t *testing.T, s sinks.Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range changes() {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestThePythonConsumerPrintsKubewiresEventsFromJetStream(t *testing.T) {
	py := python(t)
	srv := natstest.Embedded(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			stream := "KW" + strings.ToUpper(mode)
			sc := config.Sink{Name: "js", Type: kwnats.Type, Block: &kwnats.Config{
				Mode: kwnats.ModeJetStream, Servers: []string{srv.ClientURL()}, ContentMode: mode,
				Subject:   stream + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}",
				JetStream: &kwnats.JetStream{Stream: &kwnats.Stream{Name: stream}},
			}}
			c := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Cluster: "demo",
				Resources: []config.Resource{{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets", Sinks: []string{"js"}}},
				Sinks:     []config.Sink{sc}}
			c.ApplyDefaults()
			s, err := kwnats.Spec.New(c.Sinks[0].Name, c.Sinks[0].Block, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			connect(t, s)
			send(t, s)
			got := consume(t, py, "--nats", srv.ClientURL(), "--stream", stream, "--count", "3")
			if w := want(t); strings.Join(got, "\n") != strings.Join(w, "\n") {
				t.Errorf("consume.py printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}

func TestThePythonConsumerPrintsKubewiresEventsAndTombstonesFromKafka(t *testing.T) {
	py := python(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addr := kc.ListenAddrs()[0]
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			on := true
			topic := "py-" + mode + ".{resource}"
			s, err := kafka.New("kafka", &kafka.Config{
				Brokers: []string{addr}, Topic: topic, ContentMode: mode, Tombstones: &on,
				CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
				RequestTimeout: config.NewDuration(10 * time.Second), DialTimeout: config.NewDuration(2 * time.Second),
			}, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			connect(t, s)
			send(t, s)
			got := consume(t, py, "--bootstrap", addr, "--topic", "py-"+mode+".widgets", "--count", "4")
			w := append(want(t), "tombstone "+sinktest.Resource.ObjectKey("team-a", "a"))
			if strings.Join(got, "\n") != strings.Join(w, "\n") {
				t.Errorf("consume.py printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}
