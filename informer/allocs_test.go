package informer

import (
	"testing"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// The handler's share of the per-event cost on the raw cache (the
// default) is the Change itself: the partition key comes built with the
// object (raw.BuildOptions.KeyPrefix).
func TestARawUpdateAllocatesNothingButItsChange(t *testing.T) {
	for _, k := range benchdata.Kinds {
		t.Run(k.Name, func(t *testing.T) {
			w := benchWatcher(k)
			old, cur := rawCached(k, 0, 1, "1"), rawCached(k, 0, 2, "2")
			n := testing.AllocsPerRun(200, func() { w.onUpdate(old, cur) })
			if n != 1 {
				t.Errorf("an update allocates %v times, want 1 (the Change)", n)
			}
			c := w.updateChange(FromRaw(old), FromRaw(cur))
			if want := w.res.ObjectKey(cur.GetNamespace(), cur.GetName()); c == nil || c.Key != want {
				t.Fatalf("change = %+v, want key %q", c, want)
			}
		})
	}
}
