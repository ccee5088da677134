package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testkit"
)

func TestShutdownHandsEveryNotificationQueuedBehindASlowHandlerToTheOutput(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
			out := &syncOutput{}
			w := fakeWatcher(t, f, tc.cache, out)
			var g gate
			w.handleHook = g.wait
			stop := runWatcher(t, w)

			g.close()
			var want []string
			for rv := 2; rv <= 6; rv++ {
				f.modify(t, "a", fmt.Sprint(rv))
				want = append(want, fmt.Sprintf("updated@%d", rv))
			}
			testkit.Eventually(t, "the store to hold rv 6", func() bool { return storedRV(w, "a") == "6" })

			// Shut down with five notifications queued, and let the handler
			// go on only once the watch to the server is closed.
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			testkit.Eventually(t, "the watch to close", func() bool { return f.watches.Load() == 0 })
			g.open()
			if err := <-stopped; err != nil {
				t.Fatalf("Run returned %v", err)
			}

			ops, _ := resourceVersions(out.changes(), "configmaps/ns/a")
			if got := slices.DeleteFunc(ops, func(op string) bool { return strings.HasPrefix(op, "synced") }); !slices.Equal(got, want) {
				t.Fatalf("the Output got %v, want %v", got, want)
			}
			for _, c := range out.changes() {
				if c.Key == "configmaps/"+drainName || c.Key == "configmaps"+drainName {
					t.Fatalf("the drain sentinel reached the Output: %+v", c)
				}
			}
		})
	}
}

func TestAHandlerThatCannotCatchUpWithinTheDrainTimeIsReportedAsNotDrained(t *testing.T) {
	f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
	out := &syncOutput{}
	w := fakeWatcher(t, f, "", out)
	logs := &testkit.Buffer{}
	w.log = slog.New(slog.NewTextHandler(logs, nil))
	w.opt.DrainTimeout = 50 * time.Millisecond
	var g gate
	w.handleHook = g.wait
	stop := runWatcher(t, w)

	g.close()
	f.modify(t, "a", "2")
	f.modify(t, "a", "3")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	testkit.Eventually(t, "the drain deadline to be logged", func() bool { return strings.Contains(logs.String(), "drain deadline") })
	g.open()
	err := <-stopped
	if !errors.Is(err, ErrNotDrained) {
		t.Fatalf("Run returned %v, want ErrNotDrained", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the lost notifications were not logged as an error:\n%s", logs.String())
	}
}

func TestShuttingDownDuringTheInitialListReturnsWithoutWaitingForADrain(t *testing.T) {
	f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
	w := fakeWatcher(t, f, "", &syncOutput{})
	w.opt.DrainTimeout = time.Hour
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	w.handleHook = func() {
		once.Do(func() { close(entered) })
		<-release
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the handler never got the listed object")
	}
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run waited for a drain although the initial list had not synced")
	}
}
