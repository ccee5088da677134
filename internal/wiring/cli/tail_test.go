package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// tailConfig routes the sinktest resource (widgets) to a Kafka sink
// "events" (one partition, tombstones on), a Kafka sink "wide" (three
// partitions) and a JetStream sink "js", and a
// ConfigMap resource to a core NATS sink and a stdout sink.
const tailConfig = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: conformance
resources:
  - group: demo.kubewire.io
    version: v1
    resource: widgets
    sinks: [events, js, wide]
  - version: v1
    resource: configmaps
    sinks: [core, out]
sinks:
  - name: events
    type: kafka
    kafka:
      brokers: [%[1]s]
      topic: tail.{group}.{resource}
      tombstones: true
      createTopics: {partitions: 1, replicationFactor: 1}
  - name: js
    type: nats
    nats:
      mode: jetstream
      servers: [%[2]s]
      subject: kw.{cluster}.{group}.{version}.{resource}.{namespace}.{name}
      jetstream: {stream: {name: KW}}
  - name: core
    type: nats
    nats:
      mode: core
      servers: [%[2]s]
  - name: out
    type: stdout
  - name: wide
    type: kafka
    kafka:
      brokers: [%[1]s]
      topic: wide.{group}.{resource}
      createTopics: {partitions: 3, replicationFactor: 1}
`

// tailEnv is a kfake cluster and an embedded nats-server, a config file
// naming them, and kubewire's own sinks built from that file.
type tailEnv struct {
	path  string
	sinks map[string]sinks.Sink
}

func newTailEnv(t *testing.T) *tailEnv {
	t.Helper()
	kc := startKfake(t)
	srv := natstest.Embedded(t)

	path := write(t, fmt.Sprintf(tailConfig, kc.ListenAddrs()[0], srv.ClientURL()))
	return &tailEnv{path: path, sinks: connectSinks(t, path, "events", "js", "wide")}
}

// send writes the changes, as one batch each, through the named sink.
func (e *tailEnv) send(t *testing.T, sink string, changes ...*informer.Change) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range changes {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.sinks[sink].Write(ctx, []*encoding.Event{ev}); err != nil {
			t.Fatalf("write to %s: %v", sink, err)
		}
	}
}

// history is what both sinks are sent before tail starts.
func history() []*informer.Change {
	c := sinktest.Change
	return []*informer.Change{
		c(informer.OpAdded, "team-a", "a", 1),
		c(informer.OpAdded, "team-b", "b", 2),
		c(informer.OpUpdated, "team-a", "a", 3),
		c(informer.OpDeleted, "team-b", "b", 4),
		c(informer.OpAdded, "team-a", "c", 5),
	}
}

// tailTable runs tail to its end and returns its table rows as
// "type key rv", without the header.
func tailTable(t *testing.T, args ...string) []string {
	t.Helper()
	code, out, errOut := run(append([]string{"tail"}, args...)...)
	if code != cli.ExitOK {
		t.Fatalf("tail %v: exit %d\n%s%s", args, code, out, errOut)
	}
	var rows []string
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if i == 0 {
			if len(f) == 0 || f[0] != "TIME" {
				t.Fatalf("no table header in\n%s", out)
			}
			continue
		}
		rows = append(rows, strings.Join(f[1:4], " "))
	}
	return rows
}

func TestTailPrintsWhatKubewiresSinksWroteInTheOrderWritten(t *testing.T) {
	env := newTailEnv(t)
	for _, s := range []string{"events", "js"} {
		env.send(t, s, history()...)
	}
	w := "widgets.demo.kubewire.io/"
	events := []string{
		"added " + w + "team-a/a 1", "added " + w + "team-b/b 2", "updated " + w + "team-a/a 3",
		"deleted " + w + "team-b/b 4", "added " + w + "team-a/c 5",
	}
	for _, tc := range []struct {
		sink string
		want []string
	}{
		// The Kafka sink follows a delete with its tombstone.
		{"events", append(events[:4:4], "tombstone "+w+"team-b/b -", events[4])},
		{"js", events},
	} {
		t.Run(tc.sink, func(t *testing.T) {
			got := tailTable(t, "--config", env.path, "--sink", tc.sink, "--from-beginning", "--no-follow")
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tail printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestTailsFiltersKeepOnlyTheNamespacesNamesAndTypesAskedFor(t *testing.T) {
	env := newTailEnv(t)
	env.send(t, "events", history()...)
	w := "widgets.demo.kubewire.io/"
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"a namespace keeps its events and tombstones", []string{"--namespace", "team-b"},
			[]string{"added " + w + "team-b/b 2", "deleted " + w + "team-b/b 4", "tombstone " + w + "team-b/b -"}},
		{"a name keeps that object's events", []string{"--name", "a"},
			[]string{"added " + w + "team-a/a 1", "updated " + w + "team-a/a 3"}},
		{"types given as a comma list", []string{"--type", "deleted,tombstone"},
			[]string{"deleted " + w + "team-b/b 4", "tombstone " + w + "team-b/b -"}},
		{"a repeated type flag adds types", []string{"--type", "updated", "--type", "deleted"},
			[]string{"updated " + w + "team-a/a 3", "deleted " + w + "team-b/b 4"}},
		{"filters combine", []string{"--namespace", "team-a", "--type", "added"},
			[]string{"added " + w + "team-a/a 1", "added " + w + "team-a/c 5"}},
		{"--count stops after that many events", []string{"--count", "2"},
			[]string{"added " + w + "team-a/a 1", "added " + w + "team-b/b 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", env.path, "--sink", "events", "--from-beginning", "--no-follow"}, tc.flags...)
			if got := tailTable(t, args...); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("tail %v printed\n%s\nwant\n%s", tc.flags, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestTailsJSONOutputIsOneCloudEventPerLineAndYAMLOneDocumentPerEvent(t *testing.T) {
	env := newTailEnv(t)
	env.send(t, "js", history()...)
	var wantIDs []string
	for _, c := range history() {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		wantIDs = append(wantIDs, ev.ID())
	}
	code, out, errOut := run("tail", "--config", env.path, "--sink", "js", "--from-beginning", "--no-follow", "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var ev event.Event
		if err := ev.UnmarshalJSON(sc.Bytes()); err != nil {
			t.Fatalf("a line is not a CloudEvent: %v\n%s", err, sc.Text())
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("event %s is not valid: %v", ev.ID(), err)
		}
		ids = append(ids, ev.ID())
	}
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Errorf("ids %v, want %v", ids, wantIDs)
	}

	code, out, errOut = run("tail", "--config", env.path, "--sink", "js", "--from-beginning", "--no-follow", "-o", "yaml")
	if code != cli.ExitOK {
		t.Fatalf("yaml: exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "---\n"); n != len(wantIDs) || !strings.Contains(out, "specversion: \"1.0\"") {
		t.Errorf("yaml: %d documents, want %d, with specversion:\n%s", n, len(wantIDs), out)
	}
}

func TestTailByDefaultPrintsOnlyEventsWrittenAfterItStartedAndFollows(t *testing.T) {
	env := newTailEnv(t)
	for _, sink := range []string{"events", "js"} {
		t.Run(sink, func(t *testing.T) {
			env.send(t, sink, history()...)
			var out, errOut testkit.Buffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Main([]string{"tail", "--config", env.path, "--sink", sink, "--count", "2", "--type", "added"}, &out, &errOut)
			}()
			testkit.Eventually(t, "tail to say it follows", func() bool { return strings.Contains(errOut.String(), "following") })
			c := sinktest.Change
			env.send(t, sink, c(informer.OpAdded, "team-c", "new-1", 10), c(informer.OpUpdated, "team-c", "new-1", 11), c(informer.OpAdded, "team-c", "new-2", 12))
			select {
			case code := <-done:
				if code != cli.ExitOK {
					t.Fatalf("exit %d: %s", code, errOut.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("tail did not stop after --count events; stdout:\n%s", out.String())
			}
			if s := out.String(); strings.Contains(s, "team-a") || !strings.Contains(s, "team-c/new-1") || !strings.Contains(s, "team-c/new-2") {
				t.Errorf("tail printed\n%s\nwant only the two objects added after it started", s)
			}
		})
	}
}

func TestTailsBadFlagsAndSinksExitWith2AndSayWhy(t *testing.T) {
	path := write(t, fmt.Sprintf(tailConfig, "127.0.0.1:1", "nats://127.0.0.1:1"))
	for _, tc := range []struct {
		name    string
		args    []string
		mention string
	}{
		{"no --sink", []string{"--config", path}, "--config and --sink are required"},
		{"no --config", []string{"--sink", "events"}, "--config and --sink are required"},
		{"an unknown output format", []string{"--config", path, "--sink", "events", "-o", "xml"}, `-o "xml"`},
		{"an unknown event type", []string{"--config", path, "--sink", "events", "--type", "added,created"}, `--type "created"`},
		{"a negative count", []string{"--config", path, "--sink", "events", "--count", "-1"}, "--count -1"},
		{"an unknown flag", []string{"--config", path, "--sink", "events", "--follow-me"}, "--follow-me"},
		{"a positional argument", []string{"--config", path, "--sink", "events", "extra"}, "takes no arguments"},
		{"a sink the config does not define", []string{"--config", path, "--sink", "nope"}, `"events", "js", "core", "out"`},
		{"a stdout sink", []string{"--config", path, "--sink", "out"}, "keeps nothing to read back"},
		{"a core NATS sink", []string{"--config", path, "--sink", "core"}, "core NATS sink keeps nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(append([]string{"tail"}, tc.args...)...)
			if code != cli.ExitConfig || !strings.Contains(errOut, tc.mention) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and a message with %q", code, out, errOut, tc.mention)
			}
		})
	}
}

// A broker that cannot be reached before tail has caught up is an answer,
// not something to wait out: tail names the sink and exits 1.
func TestTailOfABrokerThatCannotBeReachedExitsNamingTheSink(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	path := write(t, fmt.Sprintf(tailConfig, addr, "nats://"+addr))
	done := make(chan struct{})
	var code int
	var errOut string
	go func() {
		defer close(done)
		code, _, errOut = run("tail", "--config", path, "--sink", "events")
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("tail kept waiting for a broker that is not there")
	}
	if code != cli.ExitFailed || !strings.Contains(errOut, "tail: reading sink events:") {
		t.Fatalf("exit %d, stderr %q; want exit %d and the sink named", code, errOut, cli.ExitFailed)
	}
}

// A snapshot's markers and a watch gap are written to every partition of a
// Kafka topic; tail shows each once, says where each event sat, names the
// gap's range, and gives each event's whole id.
func TestTailOnKafkaShowsPartitionsFullIdsAndEachMarkerOnce(t *testing.T) {
	env := newTailEnv(t)
	res := sinktest.Resource
	at := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	started := &informer.Change{Op: informer.OpSnapshotStarted, Resource: res, Key: res.KeyPrefix, SnapshotID: "snap-1", Observed: at}
	gap := &informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix, Observed: at,
		Gap: &informer.Gap{From: "100", To: "250", Reason: informer.GapExpired}}
	env.send(t, "wide", append([]*informer.Change{started, gap}, history()...)...)

	code, out, errOut := run("tail", "--config", env.path, "--sink", "wide", "--from-beginning", "--no-follow")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], "PARTITION") {
		t.Errorf("no PARTITION column on a Kafka sink: %q", lines[0])
	}
	if n := strings.Count(out, "snapshot.started"); n != 1 {
		t.Errorf("the snapshot.started marker is shown %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "watch.gap"); n != 1 || !strings.Contains(out, "(100, 250]") || !strings.Contains(out, informer.GapExpired) {
		t.Errorf("the gap is shown %d times (want once) or without its range (100, 250] and reason:\n%s", n, out)
	}
	for _, c := range history() {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "  "+ev.ID()+" ") && !strings.HasSuffix(strings.TrimSpace(out), ev.ID()) && !strings.Contains(out, "  "+ev.ID()+"\n") {
			t.Errorf("event id %s is not shown whole:\n%s", ev.ID(), out)
		}
	}
	partitions := map[string]bool{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 5 && (f[1] == "added" || f[1] == "updated" || f[1] == "deleted") {
			partitions[f[5]] = true
		}
	}
	for p := range partitions {
		if p != "0" && p != "1" && p != "2" {
			t.Errorf("partition column holds %q, want 0, 1 or 2:\n%s", p, out)
		}
	}
	if len(partitions) == 0 {
		t.Errorf("no object rows with a partition:\n%s", out)
	}
}

// Whether tail cannot reach Kafka or NATS, the error names the sink the
// same way, and no table header is printed before a connection works.
func TestTailOfAnUnreachableBrokerNamesTheSinkAlikeOnKafkaAndNATSAndPrintsNoHeader(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	path := write(t, fmt.Sprintf(tailConfig, addr, "nats://"+addr))
	for _, sink := range []string{"events", "js"} {
		t.Run(sink, func(t *testing.T) {
			done := make(chan struct{})
			var code int
			var out, errOut string
			go func() {
				defer close(done)
				code, out, errOut = run("tail", "--config", path, "--sink", sink)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("tail kept waiting for a broker that is not there")
			}
			if code != cli.ExitFailed || !strings.HasPrefix(errOut, "error: tail: reading sink "+sink+":") {
				t.Errorf("exit %d, stderr %q; want exit %d and the prefix \"tail: reading sink %s:\"", code, errOut, cli.ExitFailed, sink)
			}
			if out != "" {
				t.Errorf("tail printed %q to stdout before it could connect", out)
			}
		})
	}
}

// After the broker restarts, tail goes on by itself, and what is written
// then shows within a few seconds. tail starts at the end of the stream; it
// once missed, for good, what was written between the restart and the
// client's re-creation of its consumer.
func TestTailShowsNewEventsWithinSecondsOfAJetStreamRestart(t *testing.T) {
	srv := natstest.Start(t)
	path := write(t, fmt.Sprintf(tailConfig, "127.0.0.1:1", srv.URL()))
	send := sinkOf(t, path, "js")
	if err := send(sinktest.Change(informer.OpAdded, "team-a", "before", 1)); err != nil {
		t.Fatal(err)
	}

	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main([]string{"tail", "--config", path, "--sink", "js", "--count", "1", "--name", "after"}, &out, &errOut)
	}()
	testkit.Eventually(t, "tail to follow", func() bool { return strings.Contains(errOut.String(), "following") })

	srv.Restart(t)
	var sent time.Time
	testkit.Eventually(t, "a write after the restart", func() bool {
		if send(sinktest.Change(informer.OpAdded, "team-a", "after", 2)) != nil {
			return false
		}
		sent = time.Now()
		return true
	})
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		// tail's own client reconnects (ReconnectWait 2 s) and makes its
		// ordered consumer again; a loaded CI machine adds to it.
		if took := time.Since(sent); took > 10*time.Second {
			t.Errorf("the event written after the restart showed %s later, want a few seconds", took.Round(time.Millisecond))
		} else {
			t.Logf("the event written after the restart showed %s later", took.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tail did not show the event written after the restart within 30s\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}

// sinkOf connects the sink name of the config at path, as kubewire would,
// and returns a writer of one change at a time through it.
func sinkOf(t *testing.T, path, name string) (send func(*informer.Change) error) {
	t.Helper()
	cfg, err := config.Load(path, app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := cfg.Sink(name)
	s, err := app.DefaultRegistry().New(*sc, sinks.Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return func(c *informer.Change) error {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Write(wctx, []*encoding.Event{ev})
	}
}
