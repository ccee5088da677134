package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
)

// The sink fails every event of one object for a while (its Kafka
// partition's leader stopped answering, say) and takes the others. In one
// shard, with that object's change first, the other objects' changes,
// queued behind it and after its first failure, must all be delivered
// meanwhile; once the sink takes the held object again, its changes follow
// in order, each once.
func TestAKeyThatFailsHoldsBackOnlyItsOwnChangesInItsShard(t *testing.T) {
	rec := &memsink.Sink{}
	stuck := res.ObjectKey("ns", "stuck")
	var failing atomic.Bool
	failing.Store(true)
	rec.FailEach(func(ev *encoding.Event) error {
		if failing.Load() && key(ev) == stuck {
			return fmt.Errorf("memsink: %s: %w", stuck, sinks.ErrNotSent)
		}
		return nil
	})
	opt := fastOptions()
	opt.Shards = 1 // every key in the shard of the one that fails
	d := dispatch.NewDispatcher("held", rec, opt)
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Close(ctx)
	})

	d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "stuck", 1)))
	testkit.Eventually(t, "a failed write", func() bool { return rec.Writes() > 0 })
	const others = 50
	for i := range others {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm"+strconv.Itoa(i), 1)))
		if i == others/2 {
			d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "stuck", 2)))
		}
	}
	delivered := func(k string) []int {
		var rvs []int
		for _, ev := range rec.Events() {
			if key(ev) == k {
				rvs = append(rvs, rvOf(ev))
			}
		}
		return rvs
	}
	testkit.Within(t, 5*time.Second, "every other object's change while one object fails", func() bool {
		return len(rec.Events()) == others
	}, func() string { return strconv.Itoa(len(rec.Events())) + " delivered" })
	if got := delivered(stuck); len(got) != 0 {
		t.Fatalf("the failing object was delivered: %v", got)
	}

	failing.Store(false)
	testkit.Within(t, 5*time.Second, "the held object's changes", func() bool {
		return len(delivered(stuck)) == 2
	}, func() string { return fmt.Sprint(delivered(stuck)) })
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if got := delivered(stuck); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("the held object's versions were delivered as %v, want [1 2]", got)
	}
	for i := range others {
		if got := delivered(res.ObjectKey("ns", "cm"+strconv.Itoa(i))); len(got) != 1 {
			t.Errorf("cm%d delivered %d times", i, len(got))
		}
	}
}

// A key whose part of the sink stalled (its Kafka partition's leader
// stopped answering) while the rest of the sink takes events says nothing
// about the sink: a Write whose new events all went to that part must not
// make the shard wait out the retry's backoff before it takes other keys.
// The backoff here is an hour, so only a shard that goes on passes.
func TestAWriteThatReachedOnlyAStalledPartDoesNotMakeTheShardWaitItsBackoff(t *testing.T) {
	rec := &memsink.Sink{}
	stuck := res.ObjectKey("ns", "stuck")
	rec.FailEach(func(ev *encoding.Event) error {
		if key(ev) == stuck {
			return fmt.Errorf("memsink: %s: %w", stuck, sinks.ErrPartStalled)
		}
		return nil
	})
	opt := fastOptions()
	opt.Shards = 1
	opt.RetryInitial, opt.RetryMax = time.Hour, time.Hour
	d := dispatch.NewDispatcher("stalled-part", rec, opt)
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d.Close(ctx)
	})

	// The first Write holds only the stalled key's change, and fails.
	d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "stuck", 1)))
	testkit.Eventually(t, "a failed write", func() bool { return rec.Writes() > 0 })
	const others = 20
	for i := range others {
		d.Enqueue(dispatch.NewItem(change(informer.OpAdded, "cm"+strconv.Itoa(i), 1)))
	}
	testkit.Within(t, 5*time.Second, "the other objects' changes while one object's part is stalled", func() bool {
		return len(rec.Events()) == others
	}, func() string { return strconv.Itoa(len(rec.Events())) + " delivered" })
}
