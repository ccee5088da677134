package faults_test

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

func electionFlags(ns, lease, renew string) []string {
	return []string{"--leader-elect", "--leader-election-namespace", ns,
		"--leader-election-lease-duration", lease, "--leader-election-renew-deadline", renew,
		"--leader-election-retry-period", "300ms"}
}

type replica struct {
	cmd    *exec.Cmd
	stream func() []event.Event
}

// twoReplicas starts two kubewires competing for one Lease and returns the
// leader (the one whose snapshot arrives) and the standby.
func twoReplicas(t *testing.T, ns, lease, renew string) (leader, standby replica) {
	t.Helper()
	// Each replica has a spool directory of its own, as each pod has its
	// own volume: kubewire refuses to share one.
	a, sa := newProcs(t, ns).start(t, "a.jsonl", electionFlags(ns, lease, renew)...)
	b, sb := newProcs(t, ns).start(t, "b.jsonl", electionFlags(ns, lease, renew)...)
	testkit.Eventually(t, "one replica to publish a snapshot", func() bool {
		return apptest.CountCompleted(sa(), "configmaps")+apptest.CountCompleted(sb(), "configmaps") > 0
	})
	leader, standby = replica{a, sa}, replica{b, sb}
	if apptest.CountCompleted(sa(), "configmaps") == 0 {
		leader, standby = standby, leader
	}
	return leader, standby
}

func TestWhenTheLeaderIsKilledTheStandbyResumesFromItsCheckpointWithNoVersionMissing(t *testing.T) {
	ns := namespace(t)
	const lease = 3 * time.Second
	leader, standby := twoReplicas(t, ns, lease.String(), "2s")

	stop := make(chan struct{})
	wg := churnEvery(ns, stop, 6*time.Millisecond) // about 100 accepted writes a second
	testkit.Eventually(t, "the leader to publish live changes", func() bool { return len(leader.stream()) > 100 })
	if n := len(standby.stream()); n != 0 {
		t.Fatalf("the standby published %d events while the leader was alive", n)
	}
	// With --leader-elect the checkpoint is the Lease "<id>-checkpoint".
	testkit.Eventually(t, "a saved checkpoint", func() bool {
		l, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), "kubewire-checkpoint", metav1.GetOptions{})
		return err == nil && l.Annotations[checkpoint.AnnotationKey] != ""
	})
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	killed := time.Now()
	testkit.Eventually(t, "live changes from the new leader", func() bool { return len(standby.stream()) > 100 })
	took := time.Since(killed)
	t.Logf("the standby published 100 events %s after the leader was killed (lease %s)", took.Round(time.Millisecond), lease)
	if took > lease+15*time.Second {
		t.Errorf("takeover took %s, want about the lease duration %s", took, lease)
	}
	if first := standby.stream()[0]; first.Type() == encoding.TypeSnapshotStarted || first.Type() == encoding.TypeGap {
		t.Errorf("the new leader began with %s, want the changes after the checkpoint", first.Type())
	}
	close(stop)
	wg.Wait()
	all := func() []event.Event { return append(leader.stream(), standby.stream()...) }
	// The old leader's stream followed by the new one's: versions must never
	// go backwards (a repeated suffix aside), the result must equal the
	// cluster, and every version written must be in one of them.
	v := converge(t, ns, leader.stream, standby.stream)
	wg.checkOrder(t, all())
	if lost := wg.missing(all()); len(lost) > 0 {
		t.Fatalf("versions missing across the takeover (per key, by position in write order): %v", lost)
	}
	for _, ev := range all() {
		if ev.Type() == encoding.TypeGap {
			t.Fatalf("a takeover within the watch window declared a gap: %s", ev.Data())
		}
	}
	record("leader SIGKILLed, standby resumes (stdout)", wg.changes.Load(), v.Events, v.Duplicates, 0)
}

func TestALeaderStoppedWithSIGTERMReleasesTheLeaseSoTheStandbyTakesOverAtOnce(t *testing.T) {
	ns := namespace(t)
	// With a long lease, only a released lease explains a quick takeover.
	const lease = 20 * time.Second
	leader, standby := twoReplicas(t, ns, lease.String(), "15s")
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := leader.cmd.Wait(); err != nil {
		t.Fatalf("the leader exited with %v after SIGTERM, want 0", err)
	}
	stopped := time.Now()
	// The standby resumes from the checkpoint the leader saved as it
	// stopped, so it sends no snapshot: a change made now shows it leads.
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), configMapNamed("after-the-stop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the standby to publish the change made after the stop", func() bool {
		_, ok := apptest.ByKey(standby.stream())["configmaps/"+ns+"/after-the-stop"]
		return ok
	})
	if took := time.Since(stopped); took > lease/2 {
		t.Fatalf("takeover took %s after a graceful stop; the lease (%s) was not released", took, lease)
	} else {
		t.Logf("takeover %s after SIGTERM", took.Round(time.Millisecond))
	}
	if n := apptest.CountCompleted(standby.stream(), "configmaps"); n != 0 {
		t.Fatalf("the standby sent %d snapshots after a clean handover; it should resume from the saved checkpoint", n)
	}
}
