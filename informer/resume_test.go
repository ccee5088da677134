package informer

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// doneOutput acknowledges every change at once.
type doneOutput struct{ syncOutput }

func (o *doneOutput) Enqueue(c *Change) {
	o.syncOutput.Enqueue(c)
	c.Mark.Done()
}

func TestTheCheckpointFollowsTheListAndEachAcknowledgedChange(t *testing.T) {
	for _, cache := range []string{config.CacheRaw, config.CacheUnstructured} {
		t.Run(cache, func(t *testing.T) {
			f := newFakeAPIServer(t, "10", configMapJSON("a", "5"), configMapJSON("b", "7"))
			out := &doneOutput{}
			w := fakeWatcher(t, f, cache, out)
			runWatcher(t, w)
			testkit.Eventually(t, "the checkpoint at the list's version", func() bool {
				cp, _ := w.Checkpoint()
				return cp[""] == "10"
			}, func() string { cp, _ := w.Checkpoint(); return "checkpoint " + cp[""] })
			f.modify(t, "a", "11")
			testkit.Eventually(t, "the checkpoint at the acknowledged change", func() bool {
				cp, _ := w.Checkpoint()
				return cp[""] == "11"
			})
		})
	}
}

func TestABookmarkMovesTheCheckpointOfAQuietStream(t *testing.T) {
	for _, cache := range []string{config.CacheRaw, config.CacheUnstructured} {
		t.Run(cache, func(t *testing.T) {
			f := newFakeAPIServer(t, "10", configMapJSON("a", "5"))
			w := fakeWatcher(t, f, cache, &doneOutput{})
			runWatcher(t, w)
			select {
			case f.events <- `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"50"}}}`:
			case <-time.After(time.Minute):
				t.Fatal("no watch took the bookmark")
			}
			testkit.Eventually(t, "the checkpoint at the bookmark", func() bool {
				cp, _ := w.Checkpoint()
				return cp[""] == "50"
			}, func() string { cp, _ := w.Checkpoint(); return "checkpoint " + cp[""] })
		})
	}
}
