package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
)

// oneBatch makes a dispatcher that writes everything it holds in one
// batch, so a test can fail some events of a batch and not others.
func oneBatch() dispatch.Options {
	return dispatch.Options{Shards: 1, BatchSize: 100, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond}
}

func idsOf(evs []*encoding.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, strings.TrimPrefix(key(ev), res.KeyPrefix+"/ns/")+"@"+strconv.Itoa(rvOf(ev)))
	}
	return strings.Join(out, ",")
}

// started enqueues changes before it starts d, so that its first write
// holds them all: a test can then fail some events of a batch and not
// others.
func started(d *dispatch.Dispatcher, changes ...*informer.Change) *dispatch.Dispatcher {
	for _, c := range changes {
		d.Enqueue(dispatch.NewItem(c))
	}
	d.Start()
	return d
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestOnlyTheEventsThatFailedAreWrittenAgainInTheirOrder(t *testing.T) {
	s := &memsink.Sink{}
	var mu sync.Mutex
	failures := map[string]int{}
	s.FailEach(func(ev *encoding.Event) error {
		// b's and d's first changes fail twice each.
		mu.Lock()
		defer mu.Unlock()
		if k := key(ev); (k == res.ObjectKey("ns", "b") || k == res.ObjectKey("ns", "d")) && rvOf(ev) == 1 && failures[k] < 2 {
			failures[k]++
			return errors.New("partition leader moved")
		}
		return nil
	})
	before := metrics.Sum("kubewire_events_published_total", map[string]string{"sink": "only-failed"})
	d := started(dispatch.NewDispatcher("only-failed", s, oneBatch()),
		change(informer.OpAdded, "a", 1), change(informer.OpAdded, "b", 1), change(informer.OpAdded, "c", 1),
		change(informer.OpAdded, "d", 1), change(informer.OpUpdated, "b", 2))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	var writes []string
	for _, b := range s.Batches() {
		writes = append(writes, idsOf(b))
	}
	// b@2 is not in the first Write: a Write holds one event of a key.
	if got, want := strings.Join(writes, " | "), "a@1,b@1,c@1,d@1 | b@1,d@1 | b@1,d@1 | b@2"; got != want {
		t.Errorf("the writes were\n\t%s\nwant\n\t%s\n(a retry holds the failed events only, in their order)", got, want)
	}
	if got, want := idsOf(s.Events()), "a@1,c@1,b@1,d@1,b@2"; got != want {
		t.Errorf("acknowledged %s, want %s", got, want)
	}
	if got := metrics.Sum("kubewire_events_published_total", map[string]string{"sink": "only-failed"}) - before; got != 5 {
		t.Errorf("kubewire_events_published_total moved by %v, want 5: each event counted once", got)
	}
}

func TestARefusedEventIsDroppedWithoutWritingItsBatchAgainOneByOne(t *testing.T) {
	s := &memsink.Sink{}
	s.RefuseIf(func(ev *encoding.Event) bool { return strings.HasPrefix(key(ev), res.ObjectKey("ns", "huge")) })
	refused := map[string]string{"sink": "refuse-once", "reason": "refused"}
	before := metrics.Sum("kubewire_events_failed_total", refused)
	d := started(dispatch.NewDispatcher("refuse-once", s, oneBatch()), change(informer.OpAdded, "a", 1), change(informer.OpAdded, "huge", 1), change(informer.OpAdded, "huge2", 1),
		change(informer.OpAdded, "b", 1))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if got := s.Writes(); got != 1 {
		t.Errorf("%d writes, want 1: the refusal names its events, so nothing needs writing again", got)
	}
	if got, want := idsOf(s.Events()), "a@1,b@1"; got != want {
		t.Errorf("acknowledged %s, want %s", got, want)
	}
	if got := metrics.Sum("kubewire_events_failed_total", refused) - before; got != 2 {
		t.Errorf("kubewire_events_failed_total{reason=refused} moved by %v, want 2", got)
	}
}

// Events fail at random, each on its own. Whatever the dispatcher writes
// again, no Write holds two events of one key, each object's changes must
// reach the broker in order, and, since memsink keeps only what it
// acknowledged and the dispatcher resends only what failed, exactly once.
func TestEveryChangeArrivesOnceAndInKeyOrderWhileEventsFailOneByOneAtRandom(t *testing.T) {
	s := &memsink.Sink{}
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	s.FailEach(func(*encoding.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if rnd.Float64() < 0.2 {
			return errors.New("broker busy")
		}
		return nil
	})
	d := dispatch.NewDispatcher("random-items", s, fastOptions())
	d.Start()
	const keys, perKey = 30, 40
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm"+strconv.Itoa(k), rv)))
		}
	}
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	for _, b := range s.Batches() {
		keys := map[string]bool{}
		for _, ev := range b {
			if keys[key(ev)] {
				t.Fatalf("a Write held %s: two events of one key", idsOf(b))
			}
			keys[key(ev)] = true
		}
	}
	last := map[string]int{}
	for _, ev := range s.Events() {
		k, rv := key(ev), rvOf(ev)
		if rv != last[k]+1 {
			t.Fatalf("key %s: rv %d after %d; want every change once, in order", k, rv, last[k])
		}
		last[k] = rv
	}
	for k := range keys {
		if got := last[res.ObjectKey("ns", "cm"+strconv.Itoa(k))]; got != perKey {
			t.Errorf("cm%d ended at rv %d, want %d", k, got, perKey)
		}
	}
}

// overtaker would break the Write contract the way an adapter could: it
// fails a key's first event once but acknowledges the key's next one in
// the same Write.
type overtaker struct {
	memsink.Sink
	failed atomic.Bool
}

func (o *overtaker) Write(ctx context.Context, evs []*encoding.Event) error {
	if err := o.Sink.Write(ctx, evs); err != nil {
		return err
	}
	if !o.failed.CompareAndSwap(false, true) {
		return nil
	}
	be := sinks.NewBatchError(len(evs))
	for i, ev := range evs {
		if key(ev) == res.ObjectKey("ns", "b") {
			return be.Failed(i, errors.New("timed out"))
		}
	}
	return nil
}

// A Write holds one event of a key, so a key's later event waits for the
// earlier one's outcome: an adapter that would let it overtake never
// gets the chance.
func TestAKeysLaterEventIsWrittenOnlyOnceItsEarlierOneIsAcknowledged(t *testing.T) {
	o := &overtaker{}
	d := started(dispatch.NewDispatcher("overtaken", o, oneBatch()), change(informer.OpAdded, "a", 1), change(informer.OpAdded, "b", 1), change(informer.OpUpdated, "b", 2))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	var writes []string
	for _, b := range o.Batches() {
		writes = append(writes, idsOf(b))
	}
	if got, want := strings.Join(writes, " | "), "a@1,b@1 | b@1 | b@2"; got != want {
		t.Errorf("the writes were %s, want %s", got, want)
	}
}

// While one object's events keep failing, the rest of their batch is
// delivered once, the sink and the resource report failing writes, and a
// shutdown keeps only the failing events.
func TestWhileSomeEventsOfABatchFailTheSinkIsFailingAndOnlyThoseAreUndelivered(t *testing.T) {
	s := &memsink.Sink{}
	var stuck atomic.Bool
	stuck.Store(true)
	s.FailEach(func(ev *encoding.Event) error {
		if stuck.Load() && key(ev) == res.ObjectKey("ns", "stuck") {
			return errors.New("no leader")
		}
		return nil
	})
	d := started(dispatch.NewDispatcher("partial-health", s, oneBatch()), change(informer.OpAdded, "a", 1), change(informer.OpAdded, "stuck", 1), change(informer.OpAdded, "b", 1),
		change(informer.OpUpdated, "stuck", 2))
	testkit.Eventually(t, "a and b acknowledged", func() bool { return len(s.Events()) == 2 })
	// The lane reports its health before it sets the blocked gauge: poll
	// both.
	blocked := map[string]string{"sink": "partial-health", "resource": res.KeyPrefix}
	testkit.Eventually(t, "the sink reported failing and the resource blocked", func() bool {
		return d.Health() == dispatch.HealthFailing && metrics.Sum("kubewire_resource_blocked", blocked) == 1
	}, func() string {
		return fmt.Sprintf("health %v, kubewire_resource_blocked %v", d.Health(), metrics.Sum("kubewire_resource_blocked", blocked))
	})
	if got, want := idsOf(s.Events()), "a@1,b@1"; got != want {
		t.Errorf("acknowledged %s, want %s, each once", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n := d.Close(ctx); n != 2 {
		t.Errorf("Close reported %d undelivered, want the 2 events of stuck", n)
	}
}

func TestTheSinkIsHealthyAgainOnceTheFailedEventsOfABatchAreAcknowledged(t *testing.T) {
	s := &memsink.Sink{}
	var stuck atomic.Bool
	stuck.Store(true)
	s.FailEach(func(ev *encoding.Event) error {
		if stuck.Load() && key(ev) == res.ObjectKey("ns", "stuck") {
			return errors.New("no leader")
		}
		return nil
	})
	d := started(dispatch.NewDispatcher("partial-healthy-again", s, oneBatch()), change(informer.OpAdded, "a", 1), change(informer.OpAdded, "stuck", 1))
	testkit.Eventually(t, "the sink reported failing", func() bool { return d.Health() == dispatch.HealthFailing })
	stuck.Store(false)
	blocked := map[string]string{"sink": "partial-healthy-again", "resource": res.KeyPrefix}
	testkit.Eventually(t, "the sink healthy again and the resource unblocked", func() bool {
		return d.Health() == dispatch.HealthOK && metrics.Sum("kubewire_resource_blocked", blocked) == 0
	}, func() string {
		return fmt.Sprintf("health %v, kubewire_resource_blocked %v", d.Health(), metrics.Sum("kubewire_resource_blocked", blocked))
	})
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if got, want := idsOf(s.Events()), "a@1,stuck@1"; got != want {
		t.Errorf("acknowledged %s, want %s", got, want)
	}
}

// A snapshot record refused in a batch with others is dropped alone, and
// the completed marker says so.
func TestARecordRefusedInABatchMarksItsSnapshotIncompleteAndTheOthersArrive(t *testing.T) {
	s := &memsink.Sink{}
	s.RefuseIf(func(ev *encoding.Event) bool { return key(ev) == res.ObjectKey("ns", "huge") })
	synced := func(name string) *informer.Change {
		c := change(informer.OpSynced, name, 1)
		c.SnapshotID = "s1"
		return c
	}
	d := started(dispatch.NewDispatcher("refused-in-batch", s, oneBatch()), marker(informer.OpSnapshotStarted, "s1", 0), synced("a"), synced("huge"), synced("b"),
		marker(informer.OpSnapshotCompleted, "s1", 3))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	var got []string
	for _, ev := range s.Events() {
		inc, _ := ev.Extensions()["incomplete"].(string)
		got = append(got, fmt.Sprintf("%s%s", strings.TrimPrefix(ev.Type(), "io.kubewire."), map[bool]string{true: "(incomplete=" + inc + ")"}[inc != ""]))
	}
	if want := "snapshot.started,object.synced,object.synced,snapshot.completed(incomplete=1)"; strings.Join(got, ",") != want {
		t.Errorf("delivered %s, want %s", strings.Join(got, ","), want)
	}
}

// miscounting breaks the contract another way: its first Write returns a
// BatchError over fewer events than it was given.
type miscounting struct {
	memsink.Sink
	once atomic.Bool
}

func (m *miscounting) Write(ctx context.Context, evs []*encoding.Event) error {
	if m.once.CompareAndSwap(false, true) {
		return sinks.NewBatchError(1).Failed(0, sinks.Permanent(errors.New("refused")))
	}
	return m.Sink.Write(ctx, evs)
}

// A BatchError that does not cover its Write says nothing reliable of any
// event: nothing is dropped on its word, and everything is written again.
func TestABatchErrorOverTheWrongNumberOfEventsDropsNothingAndIsWrittenAgain(t *testing.T) {
	m := &miscounting{}
	refused := map[string]string{"sink": "miscounting", "reason": "refused"}
	before := metrics.Sum("kubewire_events_failed_total", refused)
	d := started(dispatch.NewDispatcher("miscounting", m, oneBatch()),
		change(informer.OpAdded, "a", 1), change(informer.OpAdded, "b", 1), change(informer.OpAdded, "c", 1))
	if n := d.Close(context.Background()); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	if got, want := idsOf(m.Events()), "a@1,b@1,c@1"; got != want {
		t.Errorf("acknowledged %s, want %s", got, want)
	}
	if got := metrics.Sum("kubewire_events_failed_total", refused) - before; got != 0 {
		t.Errorf("kubewire_events_failed_total{reason=refused} moved by %v, want 0", got)
	}
}
