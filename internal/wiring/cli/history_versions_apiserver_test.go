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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/consumer"
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
	ns := newNamespace(ctx, t, cs, "versions")
	kc := startKfake(t)
	yaml := fmt.Sprintf(historyE2EConfig, kc.ListenAddrs()[0], ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k := startKubewire(t, yaml, rc)

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
	// Runs of writes to web by three managers.
	log, marks, runs := churnInRuns(ctx, t, cs, ns, tol, []managerRun{{"writer-a", 3}, {"writer-b", 3}, {"writer-c", 3}, {"writer-a", 2}})
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
	// What the tolerance of --at below must cover.
	lag := observingLag(t, k, log)
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
	for i := 0; i < len(log); i += 3 {
		at := log[i].done
		got, code, errOut := historyAt(path, at.Format(time.RFC3339Nano))
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
		match := slices.ContainsFunc(candidates, func(rv string) bool { return maps.Equal(got, exactList(ctx, t, cms, rv)) })
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
	ns := newNamespace(ctx, t, cs, "versions-gap")
	kc := startKfake(t)
	yaml := fmt.Sprintf(historyE2EConfig, kc.ListenAddrs()[0], ns)
	path := write(t, yaml)
	cms := cs.CoreV1().ConfigMaps(ns)
	k := startKubewire(t, yaml, rc)
	var rvs []string
	put := func(value string) {
		t.Helper()
		rvs = append(rvs, putAs(ctx, t, cms, "web", value, "writer-a").rv)
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
