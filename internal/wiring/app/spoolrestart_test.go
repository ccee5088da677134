package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks"
)

// Issue 46 asked to pin what works: a restart during a broker outage loses
// no version, whatever became of the spool in between. The Lease's
// checkpoint stays at what every sink acknowledged; positions.json, one
// file for all the sinks of dispatch.spoolDir, says how far every change
// was acknowledged or spooled, and a restart resumes from the newer of the
// two, but only while every sink's spool is as the last run left it.

// spoolRun is one in-process kubewire with two spooling sinks, a and b,
// whose brokers are memsinks the test takes down and brings back.
type spoolRun struct {
	sinks  map[string]*memsink.Sink
	logs   testkit.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

// startSpoolRun runs kubewire on ns's ConfigMaps into sinks a and b, with
// its spools in spoolDir and its checkpoint in the Lease ns/lease.
func startSpoolRun(t *testing.T, ns, spoolDir, lease string) *spoolRun {
	t.Helper()
	r := &spoolRun{sinks: map[string]*memsink.Sink{"a": {}, "b": {}}, done: make(chan struct{})}
	reg := app.DefaultRegistry()
	spec := reg["stdout"]
	spec.New = func(name string, _ config.SinkBlock, _ sinks.Deps) (sinks.Sink, error) { return r.sinks[name], nil }
	reg["stdout"] = spec
	cfg, err := config.Parse([]byte(fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: test
dispatch: {spoolDir: %s}
sinks:
  - {name: a, type: stdout}
  - {name: b, type: stdout}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [a, b]}
`, spoolDir, ns)), reg)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	log := slog.New(slog.NewTextHandler(&r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc := cluster.RESTConfig(testcluster.AdminUser)
	store, err := checkpoint.New(rc, ns, lease, log)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(app.Options{Config: cfg, REST: rc, Logger: log, Registry: reg, Checkpoint: store, CheckpointInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		_, _ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("kubewire logs:\n%s", r.logs.String())
		}
	})
	return r
}

// stop shuts kubewire down as SIGTERM does and waits for its drain.
func (r *spoolRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		t.Fatal("kubewire did not stop within a minute")
	}
}

// versionsIn lists, per key, the resourceVersions of evs of the given
// types, in order.
func versionsIn(evs []*encoding.Event, types ...string) map[string][]string {
	out := map[string][]string{}
	for _, ev := range evs {
		if slices.Contains(types, ev.Type()) {
			k := ev.Extension(encoding.ExtPartitionKey)
			out[k] = append(out[k], ev.Extension(encoding.ExtResourceVersion))
		}
	}
	return out
}

var changeTypes = []string{encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeDeleted}

func rvNum(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// newest is the newest version among a resource's streams.
func newest(e checkpoint.Entry) uint64 {
	var n uint64
	for _, rv := range e.Streams {
		n = max(n, rvNum(rv))
	}
	return n
}

// update changes every ConfigMap of names once, and records each version
// under its key.
func update(t *testing.T, ns string, names []string, round int, written map[string][]string) {
	t.Helper()
	cms := kube.CoreV1().ConfigMaps(ns)
	for _, name := range names {
		cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"round": strconv.Itoa(round)}
		if cm, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		k := "configmaps/" + ns + "/" + name
		written[k] = append(written[k], cm.ResourceVersion)
	}
}

// lastDataFile is the spool file a sink writes last: the highest-numbered
// file of its newest segment.
func lastDataFile(t *testing.T, laneDir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(laneDir, "seg-*.diskqueue.*.dat"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no spool data file in %s (%v)", laneDir, err)
	}
	seg := func(f string) (gen, n int64) {
		name, num, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".dat"), ".diskqueue.")
		gen, _ = strconv.ParseInt(strings.TrimPrefix(name, "seg-"), 10, 64)
		n, _ = strconv.ParseInt(num, 10, 64)
		return gen, n
	}
	return slices.MaxFunc(files, func(x, y string) int {
		gx, nx := seg(x)
		gy, ny := seg(y)
		if gx != gy {
			return int(gx - gy)
		}
		return int(nx - ny)
	})
}

// The outage: the brokers of down go away, each ConfigMap changes three
// times, then those of downLate go away too and each changes three more
// times. kubewire stops (a rollout), between happens to the spool
// directory, and kubewire starts again with every broker back.
func TestARestartDuringAnOutageLosesNoVersionWhateverBecameOfTheSpool(t *testing.T) {
	for _, tc := range []struct {
		name           string
		down, downLate []string
		between        func(t *testing.T, spoolDir string)
	}{
		{name: "A rollout onto an empty volume: the spool directory is gone, positions.json with it.",
			down: []string{"a", "b"}, between: func(t *testing.T, dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "One sink's spool directory is gone; positions.json and the other sink's spool are left.",
			down: []string{"a", "b"}, between: func(t *testing.T, dir string) {
				if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "One sink's last spool file is cut mid-record.",
			down: []string{"a", "b"}, between: func(t *testing.T, dir string) {
				f := lastDataFile(t, filepath.Join(dir, "a", "configmaps"))
				st, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(f, st.Size()-10); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "Two sinks' spools start at different versions: a's broker went away first.",
			down: []string{"a"}, downLate: []string{"b"}, between: func(*testing.T, string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) { restartDuringOutage(t, tc.down, tc.downLate, tc.between) })
	}
}

func restartDuringOutage(t *testing.T, down, downLate []string, between func(*testing.T, string)) {
	ctx := context.Background()
	ns := namespace(t)
	names := []string{"cm-0", "cm-1", "cm-2"}
	var created uint64
	for _, name := range names {
		cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, name, nil, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created = max(created, rvNum(cm.ResourceVersion))
	}
	spoolDir, lease := t.TempDir(), unique("checkpoint")
	rc := cluster.RESTConfig(testcluster.AdminUser)
	leaseOf := func() checkpoint.Entry {
		store, err := checkpoint.New(rc, ns, lease, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := store.Load(ctx)
		return entries["configmaps"]
	}

	first := startSpoolRun(t, ns, spoolDir, lease)
	for name, s := range first.sinks {
		testkit.Eventually(t, "sink "+name+" to acknowledge the first snapshot", func() bool {
			return slices.ContainsFunc(s.Events(), func(ev *encoding.Event) bool { return ev.Type() == encoding.TypeSnapshotCompleted })
		})
	}
	testkit.Eventually(t, "the checkpoint at the ConfigMaps created", func() bool { return newest(leaseOf()) >= created })
	// A broker whose connection is reported lost: every change goes
	// straight to the spool, none waits in memory, so positions.json
	// reaches the last change before shutdown.
	outage := func(name string) {
		first.sinks[name].SetDown(true)
		first.sinks[name].SetConnected(false)
	}
	written := map[string][]string{}
	for _, s := range down {
		outage(s)
	}
	for round := 1; round <= 3; round++ {
		update(t, ns, names, round, written)
	}
	// A change still in a sink's memory when its broker goes away is
	// retried from memory, ahead of what the spool takes after it, and
	// holds positions.json back until it is delivered: let the sinks
	// that go down late acknowledge what was written so far first.
	for _, name := range downLate {
		s := first.sinks[name]
		testkit.Eventually(t, "sink "+name+" at each key's version so far", func() bool {
			got := versionsIn(s.Events(), changeTypes...)
			for k, rvs := range written {
				if !slices.Contains(got[k], rvs[len(rvs)-1]) {
					return false
				}
			}
			return true
		})
	}
	for _, s := range downLate {
		outage(s)
	}
	for round := 4; round <= 6; round++ {
		update(t, ns, names, round, written)
	}
	var last uint64
	for _, rvs := range written {
		last = max(last, rvNum(rvs[len(rvs)-1]))
	}
	testkit.Eventually(t, "every change acknowledged or spooled (positions.json)", func() bool {
		pos, _ := checkpoint.NewFile(spoolDir).Load()
		return newest(pos["configmaps"]) >= last
	})
	first.stop(t)
	if cp := newest(leaseOf()); cp >= rvNum(written["configmaps/"+ns+"/cm-0"][0]) {
		t.Fatalf("the Lease's checkpoint is at %d, past the first change a sink never acknowledged", cp)
	}

	between(t, spoolDir)

	second := startSpoolRun(t, ns, spoolDir, lease)
	for name, s := range second.sinks {
		// Every key's last version, as a change or as a snapshot's
		// record: a key's versions come in order, so all that was coming
		// has come.
		testkit.Eventually(t, "sink "+name+" at each key's last version", func() bool {
			got := versionsIn(s.Events(), append(changeTypes, encoding.TypeSynced)...)
			for k, rvs := range written {
				if !slices.Contains(got[k], rvs[len(rvs)-1]) {
					return false
				}
			}
			return true
		}, func() string {
			var got []string
			for _, ev := range s.Events() {
				got = append(got, strings.TrimPrefix(ev.Type(), encoding.TypePrefix)+"@"+ev.Extension(encoding.ExtResourceVersion))
			}
			return fmt.Sprintf("wrote %v; sink %s received %v", written, name, got)
		})
	}
	second.stop(t)
	for _, name := range []string{"a", "b"} {
		all := append(first.sinks[name].Events(), second.sinks[name].Events()...)
		changes := versionsIn(all, changeTypes...)
		for k, rvs := range written {
			var missing []string
			for _, rv := range rvs {
				if !slices.Contains(changes[k], rv) {
					missing = append(missing, rv)
				}
			}
			if len(missing) > 0 {
				t.Errorf("sink %s: %s changed to versions %v, and no change event carries %v (it received %v)", name, k, rvs, missing, changes[k])
			}
		}
		if err := firstCopiesIncrease(all); err != nil {
			t.Errorf("sink %s: %v", name, err)
		}
	}
}

// firstCopiesIncrease checks that, on the first copy of each change
// event's id, each key's versions increase.
func firstCopiesIncrease(evs []*encoding.Event) error {
	seen := map[string]bool{}
	last := map[string]uint64{}
	for _, ev := range evs {
		if !slices.Contains(changeTypes, ev.Type()) || seen[ev.ID()] {
			continue
		}
		seen[ev.ID()] = true
		k, rv := ev.Extension(encoding.ExtPartitionKey), rvNum(ev.Extension(encoding.ExtResourceVersion))
		if rv <= last[k] {
			return fmt.Errorf("%s: version %d after %d", k, rv, last[k])
		}
		last[k] = rv
	}
	return nil
}
