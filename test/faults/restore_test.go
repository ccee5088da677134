package faults_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// etcd restored from a backup under a running kubewire (issue 40): the
// stream must declare it, with a gap that says plainly when versions went
// backwards, then a snapshot of what the restored cluster holds, and go
// on with the changes made after the restore.
func TestAnEtcdRestoreUnderARunningWatchIsDeclaredThenSnapshotted(t *testing.T) {
	for _, style := range []struct {
		name      string
		restore   testcluster.Restore
		reason    string
		backwards bool
	}{
		{"plain", testcluster.Restore{}, informer.GapTooLarge, true},
		{"bump-revision", testcluster.Restore{BumpRevision: 100_000}, informer.GapExpired, false},
	} {
		for _, cache := range config.CacheModes() {
			t.Run(style.name+"/"+cache, func(t *testing.T) {
				testRestore(t, cache, style.restore, style.reason, style.backwards)
			})
		}
	}
}

func testRestore(t *testing.T, cache string, restore testcluster.Restore, reason string, backwards bool) {
	ctx := context.Background()
	ns := namespace(t)
	createConfigMaps(t, ns, 3)
	out := &holdingOutput{}
	w := watcherWithCache(t, []string{ns}, cache, out)
	runUntil(t, w)

	backup := filepath.Join(t.TempDir(), "etcd.snapshot")
	if _, err := cluster.SaveEtcd(ctx, backup); err != nil {
		t.Fatal(err)
	}
	// History the restore throws away: many versions, so that the
	// restored cluster's revision stays below where the stream was.
	var last string
	for i := range 30 {
		last = setData(t, ns, "cm-1", fmt.Sprint("after the backup ", i))
	}
	testkit.Eventually(t, "the changes after the backup", func() bool {
		return slices.Contains(versionsOf(out.changes(), "configmaps/"+ns+"/cm-1"), last)
	})
	before := len(out.changes())

	if err := cluster.RestoreEtcd(ctx, backup, restore); err != nil {
		t.Fatal(err)
	}
	after := setData(t, ns, "cm-0", "after the restore")

	testkit.Within(t, 60*time.Second, "the change made after the restore", func() bool {
		return slices.Contains(versionsOf(out.changes()[before:], "configmaps/"+ns+"/cm-0"), after)
	}, func() string {
		var ops []string
		for _, c := range out.changes()[before:] {
			ops = append(ops, string(c.Op))
		}
		return fmt.Sprint("since the restore: ", ops)
	})
	// The change after the restore can reach the stream as one of the
	// snapshot's records, ahead of the snapshot's completed marker: wait
	// for the marker too before judging what came after the restore.
	testkit.Eventually(t, "a completed snapshot after the gap", func() bool {
		cs := out.changes()[before:]
		i := slices.IndexFunc(cs, func(c *informer.Change) bool { return c.Op == informer.OpGap })
		return i >= 0 && slices.ContainsFunc(cs[i:], func(c *informer.Change) bool { return c.Op == informer.OpSnapshotCompleted })
	})
	cs := out.changes()[before:]
	var gaps []*informer.Gap
	for _, c := range cs {
		if c.Op == informer.OpGap {
			gaps = append(gaps, c.Gap)
		}
	}
	if len(gaps) != 1 {
		t.Fatalf("%d gap events after the restore, want 1", len(gaps))
	}
	g := gaps[0]
	t.Logf("gap %+v", *g)
	if g.Reason != reason || g.Backwards != backwards {
		t.Fatalf("gap %+v, want reason %s, backwards %v", *g, reason, backwards)
	}
	// The checkpoint follows the new history, even where that is behind
	// the old one.
	testkit.Eventually(t, "the checkpoint at the change after the restore", func() bool {
		cp, _ := w.Checkpoint()
		n := rvNumber(t, cp[ns])
		return n >= rvNumber(t, after) && (!backwards || n < rvNumber(t, g.From))
	}, func() string { cp, _ := w.Checkpoint(); return fmt.Sprint("checkpoint ", cp) })
	resumeFromBefore(t, ns, g.From, reason, backwards, cache)
	// The snapshot holds the restored cluster's objects, at its versions.
	l, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range l.Items {
		key := "configmaps/" + ns + "/" + cm.Name
		if !slices.Contains(versionsOf(cs, key), cm.ResourceVersion) {
			t.Errorf("%s@%s, as the restored cluster holds it, never reached the stream after the restore", key, cm.ResourceVersion)
		}
	}
}

// resumeFromBefore starts a second watcher from the checkpoint the stream
// had before the restore, as a pod whose checkpoint survived elsewhere (a
// spool volume's positions file) does: its first list must declare the
// same kind of gap.
func resumeFromBefore(t *testing.T, ns, from, reason string, backwards bool, cache string) {
	t.Helper()
	out := &holdingOutput{}
	w := watcherWithCache(t, []string{ns}, cache, out)
	w.SetResume(&informer.Resume{Streams: map[string]string{ns: from}})
	runUntil(t, w)
	cs := out.changes()
	if len(cs) == 0 || cs[0].Op != informer.OpGap {
		t.Fatalf("a start from %s after the restore does not begin with a gap", from)
	}
	if g := cs[0].Gap; g.From != from || g.Reason != reason || g.Backwards != backwards {
		t.Fatalf("a start from %s after the restore: gap %+v, want reason %s, backwards %v", from, *g, reason, backwards)
	}
}
