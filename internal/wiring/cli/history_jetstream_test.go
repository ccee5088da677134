package cli_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// historyJetStreamConfig routes the widgets to a JetStream sink whose
// stream kubewire provisions, and to one whose stream keeps five messages
// per subject; ConfigMaps go to a core NATS sink.
const historyJetStreamConfig = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: conformance
resources:
  - group: demo.kubewire.io
    version: v1
    resource: widgets
    sinks: [js, persubject]
  - version: v1
    resource: configmaps
    sinks: [core]
sinks:
  - name: js
    type: nats
    nats:
      mode: jetstream
      servers: [%[1]s]
      subject: kw.{cluster}.{group}.{version}.{resource}.{namespace}.{name}
      jetstream: {stream: {name: KW}}
  - name: persubject
    type: nats
    nats:
      mode: jetstream
      servers: [%[1]s]
      subject: few.{cluster}.{group}.{version}.{resource}.{namespace}.{name}
  - name: core
    type: nats
    nats:
      mode: core
      servers: [%[1]s]
`

func newJetStreamHistoryEnv(t *testing.T) *historyEnv {
	t.Helper()
	srv := natstest.Embedded(t)
	nc, err := natsgo.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FEW", Subjects: []string{"few.>"}, MaxMsgsPerSubject: 5}); err != nil {
		t.Fatal(err)
	}
	path := write(t, fmt.Sprintf(historyJetStreamConfig, srv.ClientURL()))
	return &historyEnv{path: path, sinks: connectSinks(t, path, "js", "persubject")}
}

func TestHistoryReadsAJetStreamSinksStreamAsItReadsAKafkaTopic(t *testing.T) {
	env := newJetStreamHistoryEnv(t)
	env.send(t, "js", historyStream()...)
	w := "widgets.demo.kubewire.io/"
	for _, tc := range []struct {
		name, at string
		want     []string
	}{
		{"at the first snapshot's list", "rv:2", []string{w + "team-a/a 1", w + "team-b/b 2"}},
		{"inside the second snapshot", "rv:5", []string{w + "team-a/a 3", w + "team-a/c 4"}},
		{"after the second snapshot", "rv:7", []string{w + "team-a/a 6", w + "team-a/c 7"}},
		{"after the gap's snapshot", "rv:11", []string{w + "team-a/c 9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := historyRows(t, cli.ExitOK, "--config", env.path, "--sink", "js", "--at", tc.at)
			if !slices.Equal(got, tc.want) {
				t.Errorf("history --at %s printed\n%s\nwant\n%s", tc.at, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestHistoryOfAJetStreamSinkExitsWithItsOwnCodeNamingWhatTheStreamCannotAnswer(t *testing.T) {
	env := newJetStreamHistoryEnv(t)
	env.send(t, "js", historyStream()...)
	env.send(t, "persubject", historyStream()[:4]...)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		mention string
	}{
		{"a point before the first snapshot's list", []string{"--sink", "js", "--at", "rv:1"}, cli.ExitNoSnapshot, "no complete snapshot"},
		{"a gap between the snapshot and the point", []string{"--sink", "js", "--at", "rv:9"}, cli.ExitWatchGap, "(8, 10] may be missing"},
		{"a stream that keeps a few messages per subject", []string{"--sink", "persubject", "--at", "rv:2"}, cli.ExitCompacted, "at most 5 message(s) per subject"},
		{"a core NATS sink", []string{"--sink", "core", "--at", "rv:2"}, cli.ExitConfig, "keeps no history"},
		{"one object of a stream that keeps a few messages per subject", []string{"--sink", "persubject", "widgets/team-a/a"}, cli.ExitCompacted, "at most 5 message(s) per subject"},
		{"one object of a core NATS sink", []string{"--sink", "core", "configmaps/team-a/a"}, cli.ExitConfig, "keeps no history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(append([]string{"history", "--config", env.path}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.mention) || out != "" && !strings.HasPrefix(out, "TIME") {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d naming %q", code, errOut, out, tc.code, tc.mention)
			}
		})
	}
}

// The cases of TestHistoryOfAnObjectPrintsEachOfItsVersionsInTheRangeOnce
// and its gap, read from a stream.
func TestHistoryOfAnObjectReadsAJetStreamSinksStreamAsItReadsAKafkaTopic(t *testing.T) {
	env := newJetStreamHistoryEnv(t)
	env.send(t, "js", historyStream()...)
	env.send(t, "js", historyStream()[5]) // a redelivery of c's add
	for _, tc := range []struct {
		name, object string
		args         []string
		code         int
		want         []string
	}{
		{"a range before the gap", "widgets/team-a/a", []string{"--since", "rv:2", "--until", "rv:7"}, cli.ExitOK, []string{"updated 3", "updated 6"}},
		{"a redelivered add and a snapshot record of a version already read are left out", "widgets/team-a/c", []string{"--until", "rv:8"}, cli.ExitOK, []string{"added 4", "updated 7"}},
		{"the first version is inclusive", "widgets/team-a/a", []string{"--since", "rv:3", "--until", "rv:3"}, cli.ExitOK, []string{"updated 3"}},
		{"a range across the gap prints what it read and exits 5", "widgets/team-a/c", nil, cli.ExitWatchGap, []string{"added 4", "updated 7", "synced 9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := versionRows(t, tc.code, append([]string{"--config", env.path, "--sink", "js", tc.object}, tc.args...)...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("history %s %v printed %v, want %v", tc.object, tc.args, got, tc.want)
			}
		})
	}
}
