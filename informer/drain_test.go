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

	"github.com/kubewire/kubewire/internal/testing/testkit"
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

// A SIGTERM while the handler is still working through the initial list
// must not drop the live changes the watch queued behind that list: the
// drain hands them to the Output as it does after the sync. The snapshot of
// that list never completes, so no consumer prunes on it.
func TestShuttingDownDuringTheInitialListHandsTheChangesQueuedBehindItToTheOutput(t *testing.T) {
	for _, tc := range caches {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
			out := &syncOutput{}
			w := fakeWatcher(t, f, tc.cache, out)
			w.opt.DrainTimeout = time.Minute
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
			// The handler holds the listed object; the watch queues two
			// live changes behind it.
			f.modify(t, "a", "2")
			f.modify(t, "a", "3")
			testkit.Eventually(t, "the store to hold rv 3", func() bool { return storedRV(w, "a") == "3" })
			cancel()
			close(release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run returned %v", err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("Run did not return")
			}
			ops, _ := resourceVersions(out.changes(), "configmaps/ns/a")
			if !slices.Equal(ops, []string{"synced@1", "updated@2", "updated@3"}) {
				t.Fatalf("the Output got %v, want [synced@1 updated@2 updated@3]: the live changes queued behind the initial list were dropped", ops)
			}
		})
	}
}

// With the apiserver out of reach at shutdown there is no watch to carry
// the drain's sentinel, and nothing can be queued behind it: the drain must
// end at once rather than wait out its deadline, which leaves the sinks no
// time to deliver what they hold.
func TestADrainWithTheAPIServerUnreachableAndNothingQueuedEndsAtOnce(t *testing.T) {
	f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
	out := &syncOutput{}
	w := fakeWatcher(t, f, "", out)
	w.opt.DrainTimeout = time.Minute
	stop := runWatcher(t, w)
	testkit.Eventually(t, "the watch", func() bool { return f.watches.Load() == 1 })
	f.srv.CloseClientConnections()
	f.srv.Close() // every list and watch from now on fails
	testkit.Eventually(t, "the watch to end", func() bool { return f.watches.Load() == 0 })
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the drain took %s with nothing queued and no apiserver", took.Round(time.Millisecond))
	}
}

// The same before the first list: an apiserver out of reach from the start
// holds no watch open, and the drain must not wait for one.
func TestStoppingBeforeTheFirstListWithTheAPIServerUnreachableEndsAtOnce(t *testing.T) {
	f := newFakeAPIServer(t, "1", configMapJSON("a", "1"))
	w := fakeWatcher(t, f, "", &syncOutput{})
	w.opt.DrainTimeout = time.Minute
	f.srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testkit.Eventually(t, "the informer to be syncing", func() bool { return w.State() == StateSyncing })
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping took %s with nothing queued and no apiserver", took.Round(time.Millisecond))
	}
}
