package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// write is one write of the churn, as the API server answered it.
type churnWrite struct {
	name, value, manager, rv string
	done                     time.Time // when the API server had answered
}

// versionOut is a line of `history OBJECT -o json`.
type versionOut struct {
	Type, ChangedBy, ResourceVersion string
	Object                           corev1.ConfigMap
}

// The API server is the oracle twice over. The churn keeps its own log of
// the writes to one object, each with the resourceVersion the API server
// returned and the field manager that wrote it: history OBJECT must print
// exactly those versions, in order, with those managers, and for a range
// of times, exactly those whose writes it observed in it. And history --at
// TIME must equal an exact LIST at a version the cluster had within a
// stated tolerance of TIME.
func TestHistoryOfAnObjectIsExactlyTheWritesThatMadeItAndAtATimeIsAListNearIt(t *testing.T) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("versions-%d", time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	yaml := fmt.Sprintf(historyE2EConfig, kc.ListenAddrs()[0], ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k := apptest.Start(t, yaml, rc)
	k.WaitFor(t, "the first snapshot to complete", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > 0 })

	// The cluster's version before the churn: the state at a point
	// before the first write observed.
	before, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An event's time is when kubewire observed the change: after the API
	// server answered the write, by the watch's delivery and the
	// informer's hand-off (a few milliseconds here; lag below), or just
	// before the answer reached the writer. 500ms is over a hundred times
	// the lag measured, for a loaded 2-core machine with -race, and still
	// shorter than the churn's pauses (up to a second between managers),
	// so the checks tell points apart.
	const tol = 500 * time.Millisecond
	var log []churnWrite // every write, of every object
	put := func(name, value, manager string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
		got, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: manager})
		if apierrors.IsNotFound(err) {
			got, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: manager})
		}
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, churnWrite{name: name, value: value, manager: manager, rv: got.ResourceVersion, done: time.Now()})
	}
	// Runs of writes to web by three managers, each write followed by one
	// to another object, whose versions are in the range but not web's.
	// A mark ends each run tol after its last answer: after kubewire
	// observed each write of the run (tol below covers the observing
	// lag), and before the next run, sent once the clock has passed it.
	var marks []time.Time
	var runs [][]churnWrite
	n := 0
	for _, run := range []struct {
		manager string
		writes  int
	}{{"writer-a", 3}, {"writer-b", 3}, {"writer-c", 3}, {"writer-a", 2}} {
		if len(log) > 0 {
			// The API server stamps a managedFields entry to the second,
			// and changedby is the newest entry: a tie with the previous
			// manager's write in the same second is a guess
			// (docs/events.md). So a new manager waits for the clock to
			// pass that second: a wait on the clock the assertion depends
			// on, not on another goroutine.
			prev := webSecond(ctx, t, cs, ns)
			mark := log[len(log)-1].done.Add(tol)
			marks = append(marks, mark)
			testkit.Within(t, 5*time.Second, "the next second and the mark", func() bool {
				now := time.Now()
				return now.Truncate(time.Second).After(prev) && now.After(mark)
			})
		}
		var ofRun []churnWrite
		for range run.writes {
			n++
			put("web", strconv.Itoa(n), run.manager)
			ofRun = append(ofRun, log[len(log)-1])
			put("other", strconv.Itoa(n), "writer-z")
		}
		runs = append(runs, ofRun)
	}
	if err := cms.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	afterDelete, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	var web []churnWrite
	for _, w := range log {
		if w.name == "web" {
			web = append(web, w)
		}
	}

	// The only wait: until the topic holds web's delete. It asks the
	// consumer package while kubewire runs, as the --at test does.
	key := "configmaps/" + ns + "/web"
	testkit.Within(t, time.Minute, "the topic to hold web's delete", func() bool {
		vs, err := consumer.Versions(ctx, consumer.VersionsConfig{Brokers: kc.ListenAddrs(), Topic: "e2e.history.configmaps", Key: key})
		return err == nil && len(vs.Versions) > 0 && vs.Versions[len(vs.Versions)-1].Type == "deleted"
	})
	// How long after the API server answered kubewire observed each
	// write: what the tolerance of --at below must cover.
	var lag time.Duration
	seen := map[string]time.Time{}
	for _, ev := range k.Events(t) {
		seen[apptest.Ext(ev, "resourceversion")] = ev.Time()
	}
	for _, w := range log {
		if o, ok := seen[w.rv]; ok {
			lag = max(lag, o.Sub(w.done))
		}
	}
	t.Logf("the longest lag from a write's answer to kubewire observing it: %s", lag)
	k.Shutdown(t)

	versions := func(args ...string) []versionOut {
		t.Helper()
		code, out, errOut := run(append([]string{"history", "--config", path, "--sink", "events", "configmaps/" + ns + "/web", "-o", "json"}, args...)...)
		if code != cli.ExitOK {
			t.Fatalf("history %v: exit %d\n%s", args, code, errOut)
		}
		var vs []versionOut
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v versionOut
			if line == "" {
				continue // no version in the range
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			vs = append(vs, v)
		}
		return vs
	}
	same := func(what string, got []versionOut, want []churnWrite) {
		t.Helper()
		var g, w []string
		for _, v := range got {
			g = append(g, fmt.Sprintf("%s %s %s v=%s (object at %s)", v.Type, v.ResourceVersion, v.ChangedBy, v.Object.Data["v"], v.Object.ResourceVersion))
		}
		for i, x := range want {
			typ := "updated"
			if i == 0 && x.rv == web[0].rv {
				typ = "added"
			}
			w = append(w, fmt.Sprintf("%s %s %s v=%s (object at %s)", typ, x.rv, x.manager, x.value, x.rv))
		}
		if !slices.Equal(g, w) {
			t.Errorf("%s:\ngot\n  %s\nwant\n  %s", what, strings.Join(g, "\n  "), strings.Join(w, "\n  "))
		}
	}

	all := versions()
	if len(all) != len(web)+1 {
		t.Fatalf("history of web printed %d versions, want its %d writes and its delete: %+v", len(all), len(web), all)
	}
	same("every version of web", all[:len(web)], web)
	del := all[len(web)]
	if rv, _ := strconv.ParseUint(del.ResourceVersion, 10, 64); del.Type != "deleted" || del.ChangedBy != "" ||
		rv <= mustUint(web[len(web)-1].rv) || rv > afterDelete {
		t.Errorf("the last version is %s at %s by %q; want deleted in (%s, %d], by no one", del.Type, del.ResourceVersion, del.ChangedBy, web[len(web)-1].rv, afterDelete)
	}
	// A range whose ends are versions of web: both ends are in it, and
	// the other object's versions between them are not.
	same("web from its 4th to its 8th version", versions("--since", "rv:"+web[3].rv, "--until", "rv:"+web[7].rv), web[3:8])
	// A range whose ends are the other object's versions.
	same("web between the other object's versions", versions("--since", "rv:"+log[1].rv, "--until", "rv:"+log[10].rv), web[1:6])
	// A range of times holds exactly the writes observed in it.
	at := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	same("web between the first two marks", versions("--since", at(marks[0]), "--until", at(marks[1])), runs[1])
	same("web up to the first mark", versions("--until", at(marks[0])), runs[0])

	// --at TIME: the state history gives for T must be the LIST at a
	// version the cluster had at some moment within tol of T.
	listAt := func(rv string) map[string]string {
		l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, cm := range l.Items {
			out[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
		}
		return out
	}
	for i := 0; i < len(log); i += 3 {
		at := log[i].done
		code, out, errOut := run("history", "--config", path, "--sink", "events", "--at", at.Format(time.RFC3339Nano), "-o", "json")
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var cm corev1.ConfigMap
			if line != "" && json.Unmarshal([]byte(line), &cm) == nil {
				got[cm.Name] = cm.ResourceVersion + " " + cm.Data["v"]
			}
		}
		// The versions the cluster had within tol of T: the one it had
		// at T - tol, and each write answered up to T + tol.
		candidates := []string{before.ResourceVersion}
		for _, w := range log {
			switch {
			case !w.done.After(at.Add(-tol)):
				candidates = []string{w.rv}
			case !w.done.After(at.Add(tol)):
				candidates = append(candidates, w.rv)
			}
		}
		match := slices.ContainsFunc(candidates, func(rv string) bool { return maps.Equal(got, listAt(rv)) })
		if code != cli.ExitOK || !match {
			t.Errorf("history --at %s (after write %d at %s): exit %d, got %v; no exact LIST within %s of it matches (versions %v; longest lag %s)\n%s",
				at.Format(time.RFC3339Nano), i, log[i].rv, code, got, tol, candidates, lag, errOut)
		}
	}
}

// webSecond is the newest managedFields time of web, as the API server
// stamped it.
func webSecond(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) time.Time {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var newest time.Time
	for _, e := range cm.ManagedFields {
		if e.Time != nil && e.Time.After(newest) {
			newest = e.Time.Time
		}
	}
	return newest
}

func mustUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// A real gap: kubewire runs while etcd compacts and the API server
// restarts, so the new watch cache refuses kubewire's watch, kubewire
// relists and declares the gap. history of an object across it prints the
// versions it read and exits 5 naming the gap; a range that ends where the
// gap begins is whole.
func TestHistoryOfAnObjectAcrossAGapTheAPIServerForcedExits5NamingIt(t *testing.T) {
	c := testCluster(t)
	rc := c.RESTConfig(testcluster.AdminUser)
	cs := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("versions-gap-%d", time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	yaml := fmt.Sprintf(historyE2EConfig, kc.ListenAddrs()[0], ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k := apptest.Start(t, yaml, rc)
	k.WaitFor(t, "the first snapshot to complete", func(evs []event.Event) bool { return apptest.CountCompleted(evs, "configmaps") > 0 })
	var rvs []string
	put := func(value string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Data: map[string]string{"v": value}}
		got, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "writer-a"})
		if apierrors.IsNotFound(err) {
			got, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "writer-a"})
		}
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, got.ResourceVersion)
	}
	key := "configmaps/" + ns + "/web"
	cfg := consumer.VersionsConfig{Brokers: kc.ListenAddrs(), Topic: "e2e.history.configmaps", Key: key}
	held := func() (*consumer.ObjectVersions, error) { return consumer.Versions(ctx, cfg) }
	put("1")
	put("2")
	testkit.Within(t, time.Minute, "the topic to hold web's second version", func() bool {
		vs, err := held()
		return err == nil && len(vs.Versions) == 2
	})
	if _, err := c.CompactEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ForgetHistory(ctx); err != nil {
		t.Fatal(err)
	}
	put("3")
	testkit.Within(t, time.Minute, "the topic to hold the gap and web's third version", func() bool {
		vs, err := held()
		return errors.Is(err, consumer.ErrWatchGapInRange) && vs != nil && slices.ContainsFunc(vs.Versions, func(v consumer.Version) bool { return fmt.Sprint(v.RV) == rvs[2] })
	})
	k.Shutdown(t)

	code, out, errOut := run("history", "--config", path, "--sink", "events", key, "-o", "json")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var v versionOut
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, v.ResourceVersion+" "+v.Object.Data["v"])
	}
	want := []string{rvs[0] + " 1", rvs[1] + " 2", rvs[2] + " 3"}
	if code != cli.ExitWatchGap || !slices.Equal(got, want) || !strings.Contains(errOut, "may be missing") {
		t.Errorf("history %s across the gap: exit %d, printed %v, stderr %q; want exit %d, %v and the gap named", key, code, got, errOut, cli.ExitWatchGap, want)
	}
	// The gap begins where the stream was, at or after the second version.
	code, out, errOut = run("history", "--config", path, "--sink", "events", key, "--until", "rv:"+rvs[1])
	if code != cli.ExitOK || strings.Count(out, "\n") != 3 {
		t.Errorf("history %s up to its second version: exit %d, want 0 and two rows\n%s%s", key, code, out, errOut)
	}
}
