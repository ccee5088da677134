package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// The oracle of TestHistoryOfAnObjectIsExactlyTheWritesThatMadeItAndAtATimeIsAListNearIt
// for a JetStream sink: one object's versions are the churn's own log of
// writes to it, rv by rv, with their field managers. And a range given as
// times holds exactly the writes kubewire observed in it: the churn notes
// times between runs of writes, far enough from every write that the
// observing lag cannot carry a write across one.
func TestHistoryOfAnObjectInAJetStreamSinkIsExactlyTheWritesThatMadeItAndATimeRangeHoldsThoseWithin(t *testing.T) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t, cs, "versions-js")
	srv := natstest.Embedded(t)
	yaml := fmt.Sprintf(historyJetStreamE2EConfig, srv.ClientURL(), ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k := startKubewire(t, yaml, rc)

	// An event's time is when kubewire observed the write: after the API
	// server committed it, so after the write was sent, and at most the
	// observing lag after the API server's answer reached the writer (a
	// few milliseconds here; measured below). A mark tol after the last
	// answer is after every write before it was observed, and the next run
	// is sent only once the clock has passed the mark. 500ms is a hundred
	// times the lag on a loaded 2-core machine with -race.
	const tol = 500 * time.Millisecond
	log, marks, runs := churnInRuns(ctx, t, cs, ns, tol, []managerRun{{"writer-a", 3}, {"writer-b", 3}, {"writer-c", 2}})
	web := slices.Concat(runs...)
	if err := cms.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	js := jetStreamOf(t, srv.ClientURL())
	key := "configmaps/" + ns + "/web"
	subject := kwnats.ResourceSubject(kwnats.DefaultSubject, "e2e", "", "v1", "configmaps")
	testkit.Within(t, time.Minute, "the stream to hold web's delete", func() bool {
		vs, err := consumer.VersionsJetStream(ctx, consumer.JetStreamVersionsConfig{JetStream: js, Stream: "HISTORY", Subject: subject, Key: key})
		return err == nil && len(vs.Versions) > 0 && vs.Versions[len(vs.Versions)-1].Type == "deleted"
	})
	lag := observingLag(t, k, log)
	k.Shutdown(t)

	versions := func(args ...string) (got []string, deleted bool) {
		t.Helper()
		code, out, errOut := run(append([]string{"history", "--config", path, "--sink", "events", key, "-o", "json"}, args...)...)
		if code != cli.ExitOK {
			t.Fatalf("history %s %v: exit %d\n%s", key, args, code, errOut)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v versionOut
			if line == "" {
				continue
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if v.Type == "deleted" {
				deleted = true
				continue
			}
			got = append(got, fmt.Sprintf("%s %s v=%s (object at %s)", v.ResourceVersion, v.ChangedBy, v.Object.Data["v"], v.Object.ResourceVersion))
		}
		return got, deleted
	}
	want := func(ws []churnWrite) []string {
		var out []string
		for _, w := range ws {
			out = append(out, fmt.Sprintf("%s %s v=%s (object at %s)", w.rv, w.manager, w.value, w.rv))
		}
		return out
	}
	at := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name    string
		args    []string
		want    []churnWrite
		deleted bool
	}{
		{"every version", nil, web, true},
		{"between two of its versions", []string{"--since", "rv:" + web[1].rv, "--until", "rv:" + web[5].rv}, web[1:6], false},
		{"up to the first mark", []string{"--until", at(marks[0])}, runs[0], false},
		{"between the marks", []string{"--since", at(marks[0]), "--until", at(marks[1])}, runs[1], false},
		{"from the second mark", []string{"--since", at(marks[1])}, runs[2], true},
	} {
		got, deleted := versions(tc.args...)
		if !slices.Equal(got, want(tc.want)) || deleted != tc.deleted {
			t.Errorf("history %s %v (%s):\ngot\n  %s\n(deleted %v)\nwant\n  %s\n(deleted %v); longest lag %s, marks %v",
				key, tc.args, tc.name, strings.Join(got, "\n  "), deleted, strings.Join(want(tc.want), "\n  "), tc.deleted, lag, marks)
		}
	}
}
