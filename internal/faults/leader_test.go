package faults_test

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/apptest"
	"github.com/kubewire/kubewire/internal/testkit"
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

func TestWhenTheLeaderIsKilledTheStandbyTakesOverWithASnapshotAndTheConsumerConverges(t *testing.T) {
	ns := namespace(t)
	const lease = 3 * time.Second
	leader, standby := twoReplicas(t, ns, lease.String(), "2s")

	stop := make(chan struct{})
	wg := churn(ns, stop)
	testkit.Eventually(t, "the leader to publish live changes", func() bool { return len(leader.stream()) > 30 })
	if n := len(standby.stream()); n != 0 {
		t.Fatalf("the standby published %d events while the leader was alive", n)
	}
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	killed := time.Now()
	testkit.Eventually(t, "the standby's snapshot", func() bool { return apptest.CountCompleted(standby.stream(), "configmaps") > 0 })
	took := time.Since(killed)
	t.Logf("standby completed its snapshot %s after the leader was killed (lease %s)", took.Round(time.Millisecond), lease)
	if took > lease+10*time.Second {
		t.Errorf("takeover took %s, want about the lease duration %s", took, lease)
	}
	if first := standby.stream()[0]; first.Type() != encoding.TypeSnapshotStarted {
		t.Errorf("the new leader began with %s, want a snapshot", first.Type())
	}
	testkit.Eventually(t, "live changes from the new leader", func() bool { return len(standby.stream()) > 60 })
	close(stop)
	wg.Wait()
	// The old leader's stream followed by the new one's: versions must never
	// go backwards and the result must equal the cluster.
	v := converge(t, ns, leader.stream, standby.stream)
	wg.checkOrder(t, append(leader.stream(), standby.stream()...))
	record("leader SIGKILLed, standby takes over (stdout)", wg.changes.Load(), v.Events, v.Duplicates, 0)
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
	testkit.Eventually(t, "the standby's snapshot", func() bool { return apptest.CountCompleted(standby.stream(), "configmaps") > 0 })
	if took := time.Since(stopped); took > lease/2 {
		t.Fatalf("takeover took %s after a graceful stop; the lease (%s) was not released", took, lease)
	} else {
		t.Logf("takeover %s after SIGTERM", took.Round(time.Millisecond))
	}
}
