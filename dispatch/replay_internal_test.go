package dispatch

import (
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// After an unclean end, records an earlier run already counted as not
// delivered (dropped, or skipped by an earlier replay) are in no spool
// now: a replayed marker's check must not count them a second time.
func TestAReplayedMarkerDoesNotCountAgainTheRecordsAnEarlierRunCounted(t *testing.T) {
	d := NewDispatcher("proof", nil, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// As loadIncomplete leaves it: 2 records of s1 dropped by the earlier run.
	d.incomplete = map[string]int{"s1": 2}
	d.loadedIncomplete = map[string]int{"s1": 2}
	read := func(p *replayProof, c *informer.Change) {
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		p.check(d, c, ev)
	}
	marker := func(op informer.Op, n int) *informer.Change {
		return &informer.Change{Op: op, Resource: recordResource, Key: recordResource.KeyPrefix, SnapshotID: "s1", Count: n, Observed: time.Unix(1, 0)}
	}
	p := &replayProof{left: 100, uncertain: true}
	read(p, marker(informer.OpSnapshotStarted, 0))
	// 15 of the 20 records are in the spool: 2 were dropped, 3 died with
	// the process.
	for i := range 15 {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("ns")
		u.SetName("cm" + strconv.Itoa(i))
		u.SetUID(types.UID("uid-" + strconv.Itoa(i)))
		u.SetResourceVersion("1")
		read(p, &informer.Change{Op: informer.OpSynced, Resource: recordResource, Key: recordResource.ObjectKey("ns", u.GetName()),
			Object: informer.FromUnstructured(u), SnapshotID: "s1", Observed: time.Unix(1, 0)})
	}
	read(p, marker(informer.OpSnapshotCompleted, 20))
	if n := d.takeIncomplete("s1"); n != 5 {
		t.Fatalf("the marker would say incomplete=%d; want 5: 2 dropped by the earlier run and 3 lost with it", n)
	}
}
