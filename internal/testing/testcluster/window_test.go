package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

// TestMeasureHowLongAResourceVersionCanBeResumed measures the window a
// checkpoint has: for how long after a resourceVersion R was current a WATCH
// from R, and a LIST at exactly R, are still served while ConfigMaps keep
// changing at a steady rate. kubewire resumes from its checkpoint with such
// a watch; once it fails with 410 Expired, kubewire declares a gap
// (docs/operations.md, "How long kubewire can be down").
//
// It takes about a quarter of an hour, so it runs only when asked:
//
//	KUBEWIRE_MEASURE_WINDOW=1 go test ./internal/testing/testcluster/ -run TestMeasure -v -timeout 30m
//
// KUBEWIRE_MEASURE_RATE sets the writes per second (default 20).
func TestMeasureHowLongAResourceVersionCanBeResumed(t *testing.T) {
	if os.Getenv("KUBEWIRE_MEASURE_WINDOW") != "1" {
		t.Skip("a measurement of several minutes; set KUBEWIRE_MEASURE_WINDOW=1 to run it")
	}
	rate := 20
	if s := os.Getenv("KUBEWIRE_MEASURE_RATE"); s != "" {
		var err error
		if rate, err = strconv.Atoi(s); err != nil || rate <= 0 {
			t.Fatalf("KUBEWIRE_MEASURE_RATE=%q: want a positive number of writes per second", s)
		}
	}
	t.Logf("machine: %s/%s, %d CPUs; kube-apiserver %s, etcd %s; %d ConfigMap writes/s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), testcluster.KubernetesVersion, testcluster.EtcdVersion, rate)
	// One cluster at a time: the subtests run in order, each with its own.
	for _, tc := range []struct {
		name string
		args []string
		// limit is when to give up waiting for a failure.
		limit time.Duration
	}{
		{
			// Without the watch cache both are served by etcd, until the
			// apiserver compacts etcd's history. Its default interval is 5m;
			// 1m makes the run short, and the result scales with it.
			name:  "without the watch cache, both are served until etcd is compacted",
			args:  []string{"--watch-cache=false", "--etcd-compaction-interval=1m"},
			limit: 5 * time.Minute,
		},
		{
			// kube-apiserver's defaults: the watch cache on, compaction every 5m.
			name:  "with the watch cache, a watch is served from the cache and an exact list from etcd",
			limit: 12 * time.Minute,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			measureWindow(t, tc.args, rate, tc.limit)
		})
	}
}

func measureWindow(t *testing.T, args []string, rate int, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit+5*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: testWriter{t}, APIServerArgs: args})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Stop()
	started := time.Now()
	rc := c.RESTConfig(testcluster.AdminUser)
	rc.QPS, rc.Burst = float32(4*rate), 4*rate
	kube := kubernetes.NewForConfigOrDie(rc)

	const writtenNS, anchorNS = "churn", "anchor"
	for _, ns := range []string{writtenNS, anchorNS} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	// The ConfigMaps written: a fixed set, updated round-robin, so etcd's
	// size stays flat however long the run.
	const objects = 50
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: writtenNS, Name: fmt.Sprintf("cm-%d", i)}}
		if _, err := kube.CoreV1().ConfigMaps(writtenNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
	}
	anchor, err := kube.CoreV1().ConfigMaps(anchorNS).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the anchor configmap: %v", err)
	}
	rv := anchor.ResourceVersion
	at := time.Now()
	t.Logf("R = %s, written %s after the apiserver was ready; apiserver args %v", rv, at.Sub(started).Round(time.Second), args)

	// The writer: one update every 1/rate s, paced by a ticker.
	var writes, writeErrors atomic.Int64
	writeCtx, stopWrites := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-writeCtx.Done():
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("cm-%d", i%objects)
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: writtenNS, Name: name},
				Data:       map[string]string{"n": strconv.Itoa(i)},
			}
			if _, err := kube.CoreV1().ConfigMaps(writtenNS).Update(writeCtx, cm, metav1.UpdateOptions{}); err != nil {
				if writeCtx.Err() == nil {
					writeErrors.Add(1)
				}
				continue
			}
			writes.Add(1)
		}
	}()
	defer func() {
		stopWrites()
		<-writerDone
	}()

	const probeEvery = 5 * time.Second
	var watchFailed, listFailed time.Duration
	var watchWrites, listWrites int64
	var watchOK, listOK time.Duration
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for watchFailed == 0 || listFailed == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("context ended: %v", ctx.Err())
		case <-tick.C:
		}
		age := time.Since(at).Round(time.Second)
		if watchFailed == 0 {
			switch err := probeWatch(ctx, kube, rv); {
			case err == nil:
				watchOK = age
			case isExpired(err):
				watchFailed, watchWrites = age, writes.Load()
				t.Logf("WATCH from R failed at age %s, after %d writes: %v", age, watchWrites, err)
			default:
				t.Logf("WATCH from R at age %s: %v (not counted)", age, err)
			}
		}
		if listFailed == 0 {
			switch err := probeList(ctx, kube, rv); {
			case err == nil:
				listOK = age
			case isExpired(err):
				listFailed, listWrites = age, writes.Load()
				t.Logf("LIST at exactly R failed at age %s, after %d writes: %v", age, listWrites, err)
			default:
				t.Logf("LIST at exactly R at age %s: %v (not counted)", age, err)
			}
		}
		if time.Since(at) > limit {
			break
		}
	}
	elapsed := time.Since(at)
	t.Logf("writes: %d in %s (%.1f/s), %d failed", writes.Load(), elapsed.Round(time.Second),
		float64(writes.Load())/elapsed.Seconds(), writeErrors.Load())
	report := func(what string, ok, failed time.Duration, n int64) {
		if failed == 0 {
			t.Logf("RESULT %s: still served at age %s (gave up at %s)", what, ok, limit)
			return
		}
		t.Logf("RESULT %s: served at age %s, 410 at age %s (after %d writes since R)", what, ok, failed, n)
	}
	report("WATCH from R", watchOK, watchFailed, watchWrites)
	report("LIST resourceVersion=R&resourceVersionMatch=Exact", listOK, listFailed, listWrites)
}

// probeWatch opens a watch of every ConfigMap from rv and reads its first
// event. Writes go on all the time, so a watch that is served delivers the
// changes after rv at once; one that is not sends a 410 Error event (or is
// refused with one).
func probeWatch(ctx context.Context, kube kubernetes.Interface, rv string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := kube.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return fmt.Errorf("the watch closed without an event")
		}
		if ev.Type == watch.Error {
			return apierrors.FromObject(ev.Object)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no event within 10s: %w", ctx.Err())
	}
}

// probeList lists ConfigMaps (one of them) at exactly rv.
func probeList(ctx context.Context, kube kubernetes.Interface, rv string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{
		ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 1,
	})
	return err
}

// isExpired reports the apiserver's "too old resource version": 410 Gone,
// reason Expired (or Gone).
func isExpired(err error) bool {
	var status apierrors.APIStatus
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		errors.As(err, &status) && status.Status().Code == http.StatusGone
}

// TestMeasureWhetherAWatchResumesAcrossAnAPIServerRestart checks the other
// way a window closes: a restarted kube-apiserver builds its watch cache
// anew from the current revision, so a resourceVersion from before the
// restart may be too old for it however young it is. Run with
// KUBEWIRE_MEASURE_WINDOW=1, like the measurement above.
func TestMeasureWhetherAWatchResumesAcrossAnAPIServerRestart(t *testing.T) {
	if os.Getenv("KUBEWIRE_MEASURE_WINDOW") != "1" {
		t.Skip("a measurement; set KUBEWIRE_MEASURE_WINDOW=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: testWriter{t}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer c.Stop()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig(testcluster.AdminUser))
	anchor, err := kube.CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "r"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the anchor configmap: %v", err)
	}
	rv := anchor.ResourceVersion
	// One change after R, so that a served watch has an event to deliver.
	write := func(n int) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after"}, Data: map[string]string{"n": strconv.Itoa(n)}}
		if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			if _, err := kube.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("write a configmap: %v", err)
			}
		}
	}
	write(1)
	t.Logf("before the restart, WATCH from R=%s: %v; exact LIST: %v", rv, probeWatch(ctx, kube, rv), probeList(ctx, kube, rv))
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatalf("RestartAPIServer: %v", err)
	}
	write(2)
	// The cache may still be initialising; ask until it answers either way.
	var werr error
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for range 20 {
		werr = probeWatch(ctx, kube, rv)
		if werr == nil || isExpired(werr) {
			break
		}
		t.Logf("WATCH from R right after the restart: %v; asking again", werr)
		<-retry.C
	}
	t.Logf("RESULT after an apiserver restart, WATCH from R=%s (a few seconds old): %v; exact LIST: %v", rv, werr, probeList(ctx, kube, rv))
}
