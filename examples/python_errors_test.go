package examples_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// run runs consume.py with args and returns its stdout, its stderr and
// its exit code. It fails the test if the script is still running after a
// minute: bad input must never hang it.
func run(t *testing.T, py string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("python-consumer", "consume.py")}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("consume.py %v did not stop within a minute; stdout:\n%s\nstderr:\n%s", args, out.String(), errOut.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("consume.py %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestThePythonConsumerEndsOnBadInputWithOneLineAndNoTraceback(t *testing.T) {
	py := python(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	broker := kc.ListenAddrs()[0]
	srv := natstest.Embedded(t)
	closed := closedAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"A Kafka topic that does not exist is named, with the sink's default topic.",
			[]string{"--bootstrap", broker, "--topic", "kubewire.configmaps"},
			"consume.py: topic 'kubewire.configmaps' not found at " + broker + "; kubewire's Kafka sink writes k8s.<group>.<resource> by default"},
		{"A Kafka address where no broker listens is named.",
			[]string{"--bootstrap", closed, "--topic", "k8s.core.configmaps", "--timeout", "2"},
			"consume.py: no Kafka broker answered at " + closed + " within 2s"},
		{"A JetStream stream that does not exist is named.",
			[]string{"--nats", srv.ClientURL(), "--stream", "NOPE"},
			"consume.py: stream 'NOPE' not found at " + srv.ClientURL()},
		{"A NATS address where no server listens is named.",
			[]string{"--nats", "nats://" + closed, "--stream", "KUBEWIRE", "--timeout", "2"},
			"consume.py: cannot connect to NATS at nats://" + closed + " within 2s"},
		{"A file that does not exist is named.",
			[]string{"--file", "no-such-vector.jsonl", "--state"},
			"consume.py: cannot read no-such-vector.jsonl: No such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, py, tc.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
				t.Errorf("stderr is\n%s\nwant one line that starts with\n%s", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout is\n%s\nwant nothing", stdout)
			}
		})
	}
}

// foreign is a structured-mode CloudEvent of another producer.
const foreign = `{"specversion":"1.0","id":"1","source":"/shop","type":"com.example.order.placed","data":{}}`

// wantSkipped checks that stderr holds one line per record that is not
// kubewire's, and no traceback.
func wantSkipped(t *testing.T, stderr string, whys ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(whys) {
		t.Fatalf("stderr is\n%s\nwant %d lines, one per record skipped", stderr, len(whys))
	}
	for i, why := range whys {
		if !strings.HasPrefix(lines[i], "consume.py: skipping the record at ") || !strings.Contains(lines[i], why) {
			t.Errorf("stderr line %d is %q, want a skipped record: %s", i+1, lines[i], why)
		}
	}
}

func TestThePythonConsumerSkipsKafkaRecordsThatAreNotKubewiresEventsWithOneLineEach(t *testing.T) {
	py := python(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "junk.widgets"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	addr := kc.ListenAddrs()[0]
	on := true
	s, err := kafka.New("kafka", &kafka.Config{
		Brokers: []string{addr}, Topic: "junk.{resource}", Tombstones: &on,
		CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second), DialTimeout: config.NewDuration(2 * time.Second),
	}, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, s)
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: "junk.widgets", RequiredAcks: kafkago.RequireAll}
	t.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx,
		kafkago.Message{Key: []byte("k"), Value: []byte("\x00\xffjunk")},
		kafkago.Message{Key: []byte("k"), Value: []byte(foreign), Headers: []kafkago.Header{{Key: "content-type", Value: []byte("application/cloudevents+json")}}},
	); err != nil {
		t.Fatal(err)
	}
	send(t, s)
	stdout, stderr, code := run(t, py, "--bootstrap", addr, "--topic", "junk.widgets", "--count", "4")
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	w4 := append(want(t), "tombstone "+sinktest.Resource.ObjectKey("team-a", "a"))
	if got := strings.TrimSpace(stdout); got != strings.Join(w4, "\n") {
		t.Errorf("consume.py printed\n%s\nwant\n%s", got, strings.Join(w4, "\n"))
	}
	wantSkipped(t, stderr, "junk.widgets/0@0: not a CloudEvent", "junk.widgets/0@1: a CloudEvent of type 'com.example.order.placed' from '/shop', not kubewire's")
}

func TestThePythonConsumerSkipsJetStreamMessagesThatAreNotKubewiresEventsWithOneLineEach(t *testing.T) {
	py := python(t)
	srv := natstest.Embedded(t)
	s, err := kwnats.Spec.New("js", &kwnats.Config{
		Mode: kwnats.ModeJetStream, Servers: []string{srv.ClientURL()},
		Subject:   "JUNK.{cluster}.{group}.{version}.{resource}.{namespace}.{name}",
		JetStream: &kwnats.JetStream{Stream: &kwnats.Stream{Name: "JUNK"}},
	}, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, s) // creates the stream
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish("JUNK.c.g.v.r.ns.n", []byte("\x00\xffjunk")); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("JUNK.c.g.v.r.ns.n")
	m.Header.Set("Content-Type", "application/cloudevents+json")
	m.Data = []byte(foreign)
	if _, err := js.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	send(t, s)
	stdout, stderr, code := run(t, py, "--nats", srv.ClientURL(), "--stream", "JUNK", "--count", "3")
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if got := strings.TrimSpace(stdout); got != strings.Join(want(t), "\n") {
		t.Errorf("consume.py printed\n%s\nwant\n%s", got, strings.Join(want(t), "\n"))
	}
	wantSkipped(t, stderr, "JUNK@1: not a CloudEvent", "JUNK@2: a CloudEvent of type 'com.example.order.placed' from '/shop', not kubewire's")
}

func TestThePythonConsumerSkipsLinesOfAFileThatAreNotEventsOfKubewiresContractWithOneLineEach(t *testing.T) {
	py := python(t)
	f := filepath.Join(t.TempDir(), "mixed.jsonl")
	lines := []string{
		"junk",
		foreign,
		`{"specversion":"1.0","id":"x","source":"/c","type":"io.kubewire.object.renamed","partitionkey":"configmaps/ns/a"}`,
		`{"specversion":"1.0","id":"uid-a1/10/added","source":"/c","type":"io.kubewire.object.added","partitionkey":"configmaps/ns/a","uid":"uid-a1","resourceversion":"10","data":{}}`,
	}
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, py, "--file", f, "--state")
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if got := strings.Join(strings.Fields(stdout), ""); got != `[{"key":"configmaps/ns/a","uid":"uid-a1","resourceVersion":"10"}]` {
		t.Errorf("consume.py --state printed\n%s\nwant the object of line 4", stdout)
	}
	wantSkipped(t, stderr, ":1: not a CloudEvent", ":2: a CloudEvent of type 'com.example.order.placed'",
		":3: type 'io.kubewire.object.renamed' is not one of kubewire's contract version 1")
}
