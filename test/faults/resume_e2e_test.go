//go:build e2e

package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The SIGKILL resume test on Apache Kafka and a nats-server process: every
// version the churn wrote must be in the real topic and stream.
func TestE2EKubewireSIGKILLedUnderChurnResumesOnRealKafkaAndJetStreamWithNoVersionMissing(t *testing.T) {
	testSIGKILLResume(t, "checkpoint", func(t *testing.T) (string, string) {
		kb := kafkatest.Start(t, nil)
		nsrv := natstest.Start(t)
		return kb.Addr, nsrv.URL()
	}, "Apache Kafka/nats-server")
}

// A restart on the same spool after the sink was down for longer than the
// apiserver's history: the Lease's checkpoint stayed where the sink last
// acknowledged, but the spool's own position says everything up to the kill
// was spooled, so kubewire resumes from there and declares no gap; the spool
// delivers the rest once the sink is back.
func TestE2EARestartOnTheSameSpoolResumesFromTheSpoolsPositionPastTheHistory(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	k := newProcs(t, ns)
	nsrv := natstest.Start(t)
	spoolDir := filepath.Join(k.dir, "spool")
	yaml := fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: faults
dispatch: {drainTimeout: 10s, bufferEvents: 100, spoolDir: %q}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [js, out]}
sinks:
  - name: out
    type: stdout
  - name: js
    type: nats
    nats:
      mode: jetstream
      servers: [%q]
      subject: "kw.%s.{namespace}.{name}"
      jetstream: {stream: {name: KW_%s}}
`, spoolDir, ns, nsrv.URL(), ns, strings.ToUpper(strings.ReplaceAll(ns, "-", "_")))
	if err := os.WriteFile(k.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	lease := ns + "/kubewire-checkpoint"
	first, stream1 := k.start(t, "first.jsonl", "--checkpoint", lease)
	testkit.Eventually(t, "the first snapshot", func() bool { return apptest.CountCompleted(stream1(), "configmaps") > 0 })
	nsrv.Kill()
	stop := make(chan struct{})
	wg := churnEvery(ns, stop, 6*time.Millisecond)
	churned := time.Now()
	testkit.Eventually(t, "3s of churn", func() bool { return time.Since(churned) > 3*time.Second })
	close(stop)
	wg.Wait()
	// Every change written reached stdout, and so the spool of the sink
	// that is down: the spool's position covers it once saved.
	last := uint64(0)
	for _, rvs := range wg.written {
		for _, rv := range rvs {
			last = max(last, rvNumber(t, rv))
		}
	}
	var pos uint64
	testkit.Eventually(t, "the spool position past the last change", func() bool {
		entries, err := checkpoint.NewFile(spoolDir).Load()
		if err != nil {
			return false
		}
		rv := entries["configmaps"].Streams[ns]
		if rv == "" {
			return false
		}
		pos = rvNumber(t, rv)
		return pos >= last
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	// The history before the spool's position is gone: the Lease's
	// checkpoint, from before the outage, cannot be resumed.
	if err := cluster.CompactEtcdAt(ctx, int64(pos)); err != nil {
		t.Fatal(err)
	}
	nsrv.Begin()
	_, stream2 := k.start(t, "second.jsonl", "--checkpoint", lease)
	created, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMapNamed("after-the-restart"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the change after the restart", func() bool {
		_, ok := apptest.ByKey(stream2())["configmaps/"+ns+"/"+created.Name]
		return ok
	})
	for _, ev := range stream2() {
		if ev.Type() == encoding.TypeGap || ev.Type() == encoding.TypeSnapshotStarted {
			t.Fatalf("the restart on the same spool sent %s; it should resume from the spool's position", ev.Type())
		}
	}
	// With the watch cache on, the cache may still serve the Lease's older
	// checkpoint whatever etcd compacted: what the start resumed from is
	// in its log.
	if want := fmt.Sprintf("%s:%d", ns, pos); !strings.Contains(k.stderr["second.jsonl"].String(), want) {
		t.Fatalf("the restart did not resume from the spool's position %d; its log:\n%s", pos, k.stderr["second.jsonl"].String())
	}
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	everyVersionIn(t, cfg, "js", wg)
}
