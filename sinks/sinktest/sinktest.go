// Package sinktest is the conformance suite every sinks.Sink adapter must
// pass against a real broker: it connects and closes cleanly, delivers a
// batch over several keys with attributes and data intact, keeps each key's
// order across many batches through a real dispatch.Dispatcher, and delivers
// every event at least once, in per-key order, across a broker restart in the
// middle of the stream. It also holds an adapter to the edges of the
// contract: an event the broker refuses for good fails with
// sinks.ErrPermanent, alone (so the dispatcher drops it instead of retrying
// it forever, and the rest of its batch and its key keep flowing), an event
// too large for the broker is either sent as its reference event
// (encoding.ReferenceEvent) or refused permanently, a Write of which only
// some events can be delivered reports each event's outcome and is retried
// with the failed events alone, a Write after Close is an error, not a
// panic, and closing twice is harmless. Every Write the suite makes, itself
// or through a dispatcher, is held to the per-event contract of
// sinks.Sink.Write: a BatchError covers the events written, and no event is
// acknowledged after an earlier event of its key failed transiently.
//
// An adapter's test provides a Harness and calls Run:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Run(t, sinktest.Harness{New: ..., Restart: ...})
//	}
package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
)

// Reader returns every event the destination holds, decoded the way a
// consumer would decode it (preferably with a reader kubewire did not write),
// in the order a consumer reading from the start sees them. The suite only
// relies on that order per partitionkey. It is called repeatedly while the
// suite waits, and must return everything each time, not only what is new.
type Reader func(ctx context.Context, t *testing.T) []*event.Event

// Harness is what an adapter gives the suite.
type Harness struct {
	// New returns a sink, not yet connected, that writes to a destination
	// no earlier call used (a fresh topic, stream or subject prefix), and
	// the Reader of that destination. Required.
	New func(t *testing.T) (sinks.Sink, Reader)
	// Restart stops the broker and starts it again with the data it had, at
	// the same address, so a connected sink can reconnect. Nil skips the
	// restart case.
	Restart func(t *testing.T)
	// Timeout bounds each wait for delivery. Default 60s.
	Timeout time.Duration
	// OversizeBytes is a size no message of the destination may reach: the
	// permanent-refusal and oversize cases write events of about this
	// size. Default 4 MiB, four times the default limit of Kafka and NATS.
	// Negative: the destination takes any size (stdout), and those cases
	// are skipped.
	OversizeBytes int
	// Partial returns, like New, a sink not yet connected and the Reader of
	// a fresh destination, except that the destination cannot take the
	// events of ClusterResource yet (their topic or stream does not exist,
	// say), so that a Write must fail those events, transiently, and
	// deliver the others. heal makes the destination take them. Nil skips
	// the partial-failure case.
	Partial func(t *testing.T) (s sinks.Sink, read Reader, heal func(t *testing.T))
	// KnownViolations names the cases (by their subtest name) the adapter
	// is known to fail, each with the reason. Those cases are skipped with
	// the reason, so the gap shows in every run instead of being hidden in
	// a weaker case.
	KnownViolations map[string]string
}

// Run runs every case of the suite as a subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("sinktest: Harness.New is required")
	}
	if h.Timeout <= 0 {
		h.Timeout = 60 * time.Second
	}
	if h.OversizeBytes == 0 {
		h.OversizeBytes = 4 << 20
	}
	sized := func(f func(*testing.T, Harness)) func(*testing.T, Harness) {
		return func(t *testing.T, h Harness) {
			if h.OversizeBytes < 0 {
				t.Skip("the destination takes events of any size")
			}
			f(t, h)
		}
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T, Harness)
	}{
		{"A sink connects and closes cleanly", connectClose},
		{"A batch over several keys arrives with attributes and data intact", batch},
		{"Each key keeps its order across many batches through a dispatcher", order},
		{"Every event arrives at least once and in key order across a broker restart", func(t *testing.T, h Harness) {
			if h.Restart == nil {
				t.Skip("the harness cannot restart its broker")
			}
			restart(t, h)
		}},
		{"An event the broker refuses for good fails permanently and its key keeps flowing", sized(refusal)},
		{"An event too large for the broker arrives as its reference event or fails permanently", sized(oversize)},
		{"A Write of which only some events can be delivered is retried with those alone and every event arrives in key order", func(t *testing.T, h Harness) {
			if h.Partial == nil {
				t.Skip("the harness cannot make its destination refuse some events")
			}
			partial(t, h)
		}},
		{"A Write after Close fails and does not panic", writeAfterClose},
		{"Closing twice neither fails nor panics", closeTwice},
	} {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := h.KnownViolations[c.name]; ok {
				t.Skip("known violation: " + why)
			}
			c.run(t, h)
		})
	}
}

func connectClose(t *testing.T, h Harness) {
	s, _, ctx := connected(t, h)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close after Connect: %v", err)
	}
}

func batch(t *testing.T, h Harness) {
	s, read, ctx := connected(t, h)
	defer s.Close(context.Background())

	const keys, perKey = 5, 6
	var sent []*encoding.Event
	for rv := 1; rv <= perKey; rv++ {
		for k := range keys {
			op := informer.OpUpdated
			if rv == 1 {
				op = informer.OpAdded
			}
			c := Change(op, nsOf(k), "cm-"+strconv.Itoa(k), rv)
			if k == 0 && rv == perKey {
				c.Op = informer.OpDeleted
			}
			sent = append(sent, mustEvent(t, c))
		}
	}
	// A cluster-scoped object and a snapshot marker have no namespace, and
	// the marker not even a name; a gap of one namespace's watch has a
	// namespace but no name: adapters that route on them must cope.
	sent = append(sent, mustEvent(t, ClusterChange(informer.OpAdded, "node-a.example", 7)))
	sent = append(sent, mustEvent(t, &informer.Change{Op: informer.OpSnapshotStarted, Resource: Resource,
		Key: Resource.KeyPrefix, SnapshotID: "snap-1", Observed: observed}))
	sent = append(sent, mustEvent(t, &informer.Change{Op: informer.OpGap, Resource: Resource, Key: Resource.KeyPrefix,
		Gap: &informer.Gap{Namespace: nsOf(1), From: "3", To: "9", Reason: informer.GapExpired}, Observed: observed}))

	// A Write may fail transiently (a partition whose leader is not known
	// yet right after the topic was created, say); the contract is that the
	// caller writes again the events that failed, as the dispatcher does.
	pending := sent
	for attempt := 1; ; attempt++ {
		err := s.Write(ctx, pending)
		checkOutcome(t, pending, err)
		if err == nil {
			break
		}
		var failed []*encoding.Event
		for i, ev := range pending {
			ierr := sinks.ItemError(err, i)
			if ierr == nil {
				continue
			}
			if errors.Is(ierr, sinks.ErrPermanent) || ctx.Err() != nil {
				t.Fatalf("Write of %d events (attempt %d): event %s: %v", len(pending), attempt, ev.ID(), ierr)
			}
			failed = append(failed, ev)
		}
		t.Logf("%d of %d events failed (attempt %d), writing them again: %.300v", len(failed), len(pending), attempt, err)
		pending = failed
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	got := waitForAll(ctx, t, read, sent, h.Timeout)
	byID := map[string]*event.Event{}
	for _, ev := range got {
		if _, dup := byID[ev.ID()]; !dup {
			byID[ev.ID()] = ev
		}
	}
	for _, want := range sent {
		if diff := compare(want, byID[want.ID()]); diff != "" {
			t.Errorf("event %s arrived changed: %s", want.ID(), diff)
		}
	}
	checkKeyOrder(t, sent, got)
}

func order(t *testing.T, h Harness) {
	s, read := h.New(t)
	d := startDispatcher(t, "sinktest-order", s)
	const keys, perKey = 20, 25
	sent := enqueueUpdates(t, d, keys, 1, perKey)
	closeCtx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	if n := d.Close(closeCtx); n != 0 {
		t.Fatalf("the dispatcher could not deliver %d of %d events", n, len(sent))
	}
	got := waitForAll(closeCtx, t, read, sent, h.Timeout)
	checkKeyOrder(t, sent, got)
}

func restart(t *testing.T, h Harness) {
	s, read := h.New(t)
	d := startDispatcher(t, "sinktest-restart", s)
	const keys, perKey = 30, 40
	var sent []*encoding.Event
	enqueue := func(from, to int) { sent = append(sent, enqueueUpdates(t, d, keys, from, to)...) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*h.Timeout)
	defer cancel()

	// First half; restart as soon as the broker holds some of it, so the
	// restart lands while most of it is still queued or in flight.
	enqueue(1, perKey/2)
	testkit.Within(t, h.Timeout, "the first events to reach the broker", func() bool { return len(read(ctx, t)) > 0 })
	h.Restart(t)
	// Objects keep changing while the sink reconnects.
	enqueue(perKey/2+1, perKey)

	if n := d.Close(ctx); n != 0 {
		t.Fatalf("the dispatcher could not deliver %d of %d events after the restart", n, len(sent))
	}
	got := waitForAll(ctx, t, read, sent, h.Timeout)
	checkKeyOrder(t, sent, got)
	t.Logf("%d events sent, %d read (%d duplicates)", len(sent), len(got), len(got)-len(sent))
}

// enqueueUpdates enqueues on d an update of each of keys ConfigMaps at every
// resourceVersion from..to, one version after the other, and returns their
// events in that order.
func enqueueUpdates(t *testing.T, d *dispatch.Dispatcher, keys, from, to int) []*encoding.Event {
	var sent []*encoding.Event
	for rv := from; rv <= to; rv++ {
		for k := range keys {
			c := Change(informer.OpUpdated, nsOf(k), "cm-"+strconv.Itoa(k), rv)
			d.Enqueue(dispatch.NewItem(c))
			sent = append(sent, mustEvent(t, c))
		}
	}
	return sent
}

// startDispatcher starts a dispatcher named name on s, checked against the
// Sink contract, with dispatchOptions.
func startDispatcher(t *testing.T, name string, s sinks.Sink) *dispatch.Dispatcher {
	d := dispatch.NewDispatcher(name, checked(t, s), dispatchOptions(t))
	d.Start()
	return d
}

// dispatchOptions makes a dispatcher that retries fast and writes small
// batches, so every case crosses many batch boundaries.
func dispatchOptions(t *testing.T) dispatch.Options {
	return dispatch.Options{
		Shards:       4,
		BatchSize:    7,
		RetryInitial: 10 * time.Millisecond,
		RetryMax:     200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// waitForAll reads until every sent id is present or the timeout passes, and
// returns the last read.
func waitForAll(ctx context.Context, t *testing.T, read Reader, sent []*encoding.Event, timeout time.Duration) []*event.Event {
	t.Helper()
	var got []*event.Event
	var missing []string
	testkit.Within(t, timeout, "every event to arrive", func() bool {
		got = read(ctx, t)
		seen := map[string]bool{}
		for _, ev := range got {
			seen[ev.ID()] = true
		}
		missing = missing[:0]
		for _, ev := range sent {
			if !seen[ev.ID()] {
				missing = append(missing, ev.ID())
			}
		}
		return len(missing) == 0
	}, func() string {
		if len(missing) > 5 {
			return fmt.Sprintf("%d of %d events missing, e.g. %q", len(missing), len(sent), missing[:5])
		}
		return fmt.Sprintf("missing %q", missing)
	})
	return got
}

// checkKeyOrder checks that, for each key, the first occurrences of the
// events read are in the order they were sent. Duplicates are allowed (at
// least once), reordering is not.
func checkKeyOrder(t *testing.T, sent []*encoding.Event, got []*event.Event) {
	t.Helper()
	pos := map[string]int{} // id -> index among its key's sent events
	perKey := map[string]int{}
	for _, ev := range sent {
		k := key(ev)
		pos[ev.ID()] = perKey[k]
		perKey[k]++
	}
	next := map[string]int{}
	seen := map[string]bool{}
	for _, ev := range got {
		if seen[ev.ID()] {
			continue
		}
		seen[ev.ID()] = true
		k := key(ev)
		p, ok := pos[ev.ID()]
		if !ok {
			t.Errorf("read event %s (key %s) that was never sent", ev.ID(), k)
			continue
		}
		if p != next[k] {
			t.Errorf("key %s: event %s (number %d of the key) arrived where number %d was due", k, ev.ID(), p+1, next[k]+1)
			return
		}
		next[k]++
	}
}

// compare describes how got differs from want, or returns "".
func compare(want *encoding.Event, got *event.Event) string {
	if got == nil {
		return "missing"
	}
	var diffs []string
	check := func(what string, w, g any) {
		if !reflect.DeepEqual(w, g) {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", what, g, w))
		}
	}
	check("specversion", want.SpecVersion(), got.SpecVersion())
	check("type", want.Type(), got.Type())
	check("source", want.Source(), got.Source())
	check("subject", want.Subject(), got.Subject())
	check("datacontenttype", want.DataContentType(), got.DataContentType())
	if !want.Time().Equal(got.Time()) {
		diffs = append(diffs, fmt.Sprintf("time: got %s, want %s", got.Time(), want.Time()))
	}
	check("extensions", formatAll(want.Extensions()), formatAll(got.Extensions()))
	if !sameJSON(want.Data(), got.Data()) {
		diffs = append(diffs, fmt.Sprintf("data: got %s, want %s", got.Data(), want.Data()))
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprint(diffs)
}

func formatAll(ext map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range ext {
		s, err := types.Format(v)
		if err != nil {
			s = fmt.Sprintf("unformattable %T", v)
		}
		out[k] = s
	}
	return out
}

// sameJSON compares data as JSON values, so that a structured-mode round
// trip that re-indents is not a difference; other bytes must be equal.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// key is an event's partitionkey, whether kubewire's (sent) or sdk-go's
// (read back).
func key(ev interface{ Extensions() map[string]any }) string {
	k, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	return k
}

func mustEvent(t *testing.T, c *informer.Change) *encoding.Event {
	t.Helper()
	ev, err := encoding.New(c)
	if err != nil {
		t.Fatalf("encoding %s: %v", c.Key, err)
	}
	return ev
}

func nsOf(k int) string { return "team-" + strconv.Itoa(k%3) }

var observed = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// Resource is the namespaced resource of the suite's changes: a custom
// resource, so group, version and resource all appear in sources and keys.
var Resource = informer.NewResource("conformance", schema.GroupVersionResource{
	Group: "demo.kubewire.io", Version: "v1", Resource: "widgets"}, "Widget", true)

// ClusterResource is the cluster-scoped resource of the suite's changes.
var ClusterResource = informer.NewResource("conformance", schema.GroupVersionResource{
	Version: "v1", Resource: "nodes"}, "Node", false)

// Change builds a change of a namespaced object at resourceVersion rv. Its
// data holds values that need care in any binding (quotes, percent, spaces,
// non-ASCII), as labels and annotations may.
func Change(op informer.Op, namespace, name string, rv int) *informer.Change {
	return ChangeOf(op, Object(namespace, name, rv))
}

// ChangeOf is the change of a namespaced object that a test built with
// Object and then altered (made too large for its broker, say).
func ChangeOf(op informer.Op, u *unstructured.Unstructured) *informer.Change {
	return &informer.Change{Op: op, Resource: Resource, Key: Resource.ObjectKey(u.GetNamespace(), u.GetName()),
		Object: informer.FromUnstructured(u), Observed: observed}
}

// Object is the object of Change.
func Object(namespace, name string, rv int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("demo.kubewire.io/v1")
	u.SetKind("Widget")
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetUID(k8stypes.UID("uid-" + namespace + "-" + name))
	u.SetResourceVersion(strconv.Itoa(rv))
	u.SetAnnotations(map[string]string{"note": `50% "quoted" ünïcødé ✓ 😀`})
	u.Object["spec"] = map[string]any{"size": int64(rv), "text": "line one\nline two"}
	return u
}

// ClusterChange builds a change of a cluster-scoped object.
func ClusterChange(op informer.Op, name string, rv int) *informer.Change {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Node")
	u.SetName(name)
	u.SetUID(k8stypes.UID("uid-" + name))
	u.SetResourceVersion(strconv.Itoa(rv))
	return &informer.Change{Op: op, Resource: ClusterResource, Key: ClusterResource.ObjectKey("", name), Object: informer.FromUnstructured(u), Observed: observed}
}

// CloudEvents is sdk-go's view of evs, for a Reader of a destination that
// keeps kubewire's events as they were written (an in-memory sink).
func CloudEvents(evs []*encoding.Event) []*event.Event {
	out := make([]*event.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev.CloudEvent()
	}
	return out
}

// FromCloudEvent is kubewire's event of sdk-go's ev, for tests that build
// an event by hand; it fails the test when encoding refuses ev.
func FromCloudEvent(t testing.TB, ev *event.Event) *encoding.Event {
	t.Helper()
	e, err := encoding.FromCloudEvent(ev)
	if err != nil {
		t.Fatalf("event %s: %v", ev.ID(), err)
	}
	return e
}
