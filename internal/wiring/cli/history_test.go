package cli_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// historyConfig routes the sinktest resource (widgets) to a Kafka sink
// "events" of three partitions, and to "compacted", whose topic is
// created with cleanup.policy compact; ConfigMaps go to "refs" in payload
// reference and to "filtered" through a filter.
const historyConfig = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: conformance
resources:
  - group: demo.kubewire.io
    version: v1
    resource: widgets
    sinks: [events, compacted]
  - version: v1
    resource: configmaps
    payload: reference
    sinks: [refs]
  - version: v1
    resource: secrets
    filter: 'true'
    sinks: [filtered]
sinks:
  - name: events
    type: kafka
    kafka:
      brokers: [%[1]s]
      topic: history.{group}.{resource}
      createTopics: {partitions: 3, replicationFactor: 1}
  - name: compacted
    type: kafka
    kafka:
      brokers: [%[1]s]
      topic: compacted.{group}.{resource}
      createTopics: {partitions: 1, replicationFactor: 1, cleanupPolicy: compact}
  - name: refs
    type: kafka
    kafka:
      brokers: [%[1]s]
  - name: filtered
    type: kafka
    kafka:
      brokers: [%[1]s]
`

type historyEnv struct {
	path  string
	sinks map[string]sinks.Sink
}

func newHistoryEnv(t *testing.T) *historyEnv {
	t.Helper()
	kc := startKfake(t)
	path := write(t, fmt.Sprintf(historyConfig, kc.ListenAddrs()[0]))
	return &historyEnv{path: path, sinks: connectSinks(t, path, "events", "compacted")}
}

func (e *historyEnv) send(t *testing.T, sink string, changes ...*informer.Change) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range changes {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if c.Op == informer.OpSnapshotCompleted && c.Count < 0 {
			ev.SetExtension(encoding.ExtIncomplete, "1")
		}
		if err := e.sinks[sink].Write(ctx, []*encoding.Event{ev}); err != nil {
			t.Fatalf("write to %s: %v", sink, err)
		}
	}
}

// snap is a snapshot marker of the widgets at rv; a negative count marks
// a completed marker incomplete.
func snap(op informer.Op, id string, rv, count int) *informer.Change {
	r := sinktest.Resource
	v := ""
	if rv > 0 {
		v = fmt.Sprint(rv)
	}
	return &informer.Change{Op: op, Resource: r, Key: r.KeyPrefix, SnapshotID: id, SnapshotRV: v, Count: count, Observed: time.Now()}
}

func synced(ns, name string, rv int, id string) *informer.Change {
	c := sinktest.Change(informer.OpSynced, ns, name, rv)
	c.SnapshotID = id
	return c
}

func gapOf(from, to string) *informer.Change {
	r := sinktest.Resource
	return &informer.Change{Op: informer.OpGap, Resource: r, Key: r.KeyPrefix, Observed: time.Now(),
		Gap: &informer.Gap{From: from, To: to, Reason: informer.GapExpired}}
}

// historyStream is a stream with two snapshots, changes between them, a
// live change inside the second window, a gap and a third snapshot.
func historyStream() []*informer.Change {
	c := sinktest.Change
	return []*informer.Change{
		snap(informer.OpSnapshotStarted, "s1", 0, 0),
		synced("team-a", "a", 1, "s1"), synced("team-b", "b", 2, "s1"),
		snap(informer.OpSnapshotCompleted, "s1", 2, 2),
		c(informer.OpUpdated, "team-a", "a", 3),
		c(informer.OpAdded, "team-a", "c", 4),
		c(informer.OpDeleted, "team-b", "b", 5),
		// a changes at 6 while s2 runs: its record is read after the
		// change, at 6, so the window stands for the state at 6, not at 5.
		snap(informer.OpSnapshotStarted, "s2", 5, 0),
		c(informer.OpUpdated, "team-a", "a", 6),
		synced("team-a", "a", 6, "s2"), synced("team-a", "c", 4, "s2"),
		snap(informer.OpSnapshotCompleted, "s2", 6, 2),
		c(informer.OpUpdated, "team-a", "c", 7),
		c(informer.OpDeleted, "team-a", "a", 8),
		gapOf("8", "10"),
		snap(informer.OpSnapshotStarted, "s3", 10, 0),
		synced("team-a", "c", 9, "s3"),
		snap(informer.OpSnapshotCompleted, "s3", 10, 1),
	}
}

// historyRows runs history and returns its rows as "key rv", sorted.
func historyRows(t *testing.T, wantCode int, args ...string) (rows []string, stderr string) {
	t.Helper()
	code, out, errOut := run(append([]string{"history"}, args...)...)
	if code != wantCode {
		t.Fatalf("history %v: exit %d, want %d\n%s%s", args, code, wantCode, out, errOut)
	}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) < 4 {
			continue
		}
		rows = append(rows, f[2]+" "+f[3])
	}
	slices.Sort(rows)
	return rows, errOut
}

func TestHistoryAtAResourceVersionPrintsTheObjectsAsTheyWereThen(t *testing.T) {
	env := newHistoryEnv(t)
	env.send(t, "events", historyStream()...)
	w := "widgets.demo.kubewire.io/"
	for _, tc := range []struct {
		name, at string
		want     []string
	}{
		{"at the first snapshot's list", "rv:2", []string{w + "team-a/a 1", w + "team-b/b 2"}},
		{"after an update and an add", "rv:4", []string{w + "team-a/a 3", w + "team-a/c 4", w + "team-b/b 2"}},
		// s2 started at 5 but its window holds a at 6: the answer comes
		// from s1 and the changes up to 5, and s2's completed marker
		// must not prune a, whose only events in s2 are above 5.
		{"inside the second snapshot", "rv:5", []string{w + "team-a/a 3", w + "team-a/c 4"}},
		{"at the second snapshot's list", "rv:6", []string{w + "team-a/a 6", w + "team-a/c 4"}},
		{"after the second snapshot", "rv:7", []string{w + "team-a/a 6", w + "team-a/c 7"}},
		{"after the gap's snapshot", "rv:11", []string{w + "team-a/c 9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := historyRows(t, cli.ExitOK, "--config", env.path, "--sink", "events", "--at", tc.at)
			if !slices.Equal(got, tc.want) {
				t.Errorf("history --at %s printed\n%s\nwant\n%s", tc.at, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	t.Run("selectors keep the namespaces and names asked for", func(t *testing.T) {
		got, _ := historyRows(t, cli.ExitOK, "--config", env.path, "--sink", "events", "--at", "rv:4", "--namespace", "team-a", "--name", "c")
		if want := []string{w + "team-a/c 4"}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestHistoryExitsWithItsOwnCodeNamingWhatTheStreamCannotAnswer(t *testing.T) {
	env := newHistoryEnv(t)
	env.send(t, "events", historyStream()...)
	env.send(t, "compacted", historyStream()[:4]...)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		mention string
	}{
		{"a point before the first snapshot's list", []string{"--sink", "events", "--at", "rv:1"}, cli.ExitNoSnapshot, "no complete snapshot"},
		{"a gap between the snapshot and the point", []string{"--sink", "events", "--at", "rv:9"}, cli.ExitWatchGap, "(8, 10] may be missing"},
		{"a compacted topic", []string{"--sink", "compacted", "--at", "rv:2"}, cli.ExitCompacted, `cleanup.policy "compact"`},
		{"payload reference", []string{"--sink", "refs", "--at", "rv:2"}, cli.ExitNotWhole, `payload "reference"`},
		{"a filter", []string{"--sink", "filtered", "--at", "rv:2"}, cli.ExitNotWhole, "has a filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(append([]string{"history", "--config", env.path}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.mention) || out != "" && !strings.HasPrefix(out, "TIME") {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d naming %q", code, errOut, out, tc.code, tc.mention)
			}
		})
	}
}

func TestHistoryRefusesAnIncompleteSnapshotAndUsesAnOlderCompleteOne(t *testing.T) {
	env := newHistoryEnv(t)
	c := sinktest.Change
	env.send(t, "events",
		snap(informer.OpSnapshotStarted, "s1", 0, 0), synced("team-a", "a", 1, "s1"),
		snap(informer.OpSnapshotCompleted, "s1", 1, -1),
		c(informer.OpAdded, "team-a", "b", 2),
		snap(informer.OpSnapshotStarted, "s2", 2, 0), synced("team-a", "a", 1, "s2"), synced("team-a", "b", 2, "s2"),
		snap(informer.OpSnapshotCompleted, "s2", 2, 2),
		snap(informer.OpSnapshotStarted, "s3", 2, 0), synced("team-a", "b", 2, "s3"),
		snap(informer.OpSnapshotCompleted, "s3", 3, -1),
	)
	code, _, errOut := run("history", "--config", env.path, "--sink", "events", "--at", "rv:1")
	if code != cli.ExitIncomplete || !strings.Contains(errOut, "incomplete") {
		t.Errorf("at rv:1, only behind an incomplete snapshot: exit %d, stderr %q; want %d", code, errOut, cli.ExitIncomplete)
	}
	// s3 is incomplete (a's record lost): it must not prune a.
	w := "widgets.demo.kubewire.io/"
	got, _ := historyRows(t, cli.ExitOK, "--config", env.path, "--sink", "events", "--at", "rv:3")
	if want := []string{w + "team-a/a 1", w + "team-a/b 2"}; !slices.Equal(got, want) {
		t.Errorf("at rv:3 got %v, want %v", got, want)
	}
}

func TestHistoryTakesItsFlagsStrictly(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--config", "x", "--sink", "events"}, "--at are required"},
		{[]string{"--config", "x", "--sink", "events", "--at", "rv:x"}, "positive decimal"},
		{[]string{"--config", "x", "--sink", "events", "--at", "-1q"}, "relative time"},
		{[]string{"--config", "x", "--sink", "events", "--at", "yesterday"}, "RFC 3339"},
	} {
		code, _, errOut := run(append([]string{"history"}, tc.args...)...)
		if code != cli.ExitConfig || !strings.Contains(errOut, tc.mention) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %q", tc.args, code, errOut, cli.ExitConfig, tc.mention)
		}
	}
}
