package httpsink_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	httpsink "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// interopEvents are events of every shape kubewire sends: object changes
// (with data that needs care: quotes, percent, non-ASCII, a line break), a
// cluster-scoped object, snapshot markers without data or object, a gap,
// and a reference event.
func interopEvents(t *testing.T) []*encoding.Event {
	t.Helper()
	changes := []*informer.Change{
		sinktest.Change(informer.OpAdded, "team-a", "a", 1),
		sinktest.Change(informer.OpUpdated, "team-a", "a", 2),
		sinktest.Change(informer.OpDeleted, "team-a", "a", 3),
		sinktest.ClusterChange(informer.OpSynced, "node-1", 4),
		{Op: informer.OpSnapshotStarted, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix, SnapshotID: "snap-9"},
		{Op: informer.OpGap, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			Gap: &informer.Gap{Namespace: "team-a", From: "3", To: "9", Reason: informer.GapExpired}},
	}
	var evs []*encoding.Event
	for _, c := range changes {
		if c.Observed.IsZero() {
			c.Observed = sinktest.Change(informer.OpAdded, "x", "x", 1).Observed
		}
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	ref, err := encoding.ReferenceEvent(evs[1])
	if err != nil {
		t.Fatal(err)
	}
	return append(evs, ref)
}

// sameEvent describes how sdk-go's reading of an event differs from what
// was sent, or returns "". Data must be equal byte for byte.
func sameEvent(want *encoding.Event, got *event.Event) string {
	switch {
	case got.ID() != want.ID(), got.Type() != want.Type(), got.Source() != want.Source(),
		got.Subject() != want.Subject(), got.SpecVersion() != want.SpecVersion(),
		got.DataContentType() != want.DataContentType(), !got.Time().Equal(want.Time()):
		return "context " + got.Context.String() + "\nwant\n" + want.String()
	case !reflect.DeepEqual(stringExts(got), stringExts(want)):
		return "extensions differ"
	case !bytes.Equal(got.Data(), want.Data()):
		return "data " + string(got.Data()) + "\nwant\n" + string(want.Data())
	}
	return ""
}

func stringExts(ev interface{ Extensions() map[string]any }) map[string]string {
	out := map[string]string{}
	for k, v := range ev.Extensions() {
		s, _ := types.Format(v)
		out[k] = s
	}
	return out
}

func TestSDKGoReadsWhatTheSinkSendsInEveryContentMode(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured, httpsink.ContentModeBatched} {
		t.Run(mode, func(t *testing.T) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, ContentMode: mode})
			ctx := connect(t, s)
			sent := interopEvents(t)
			if err := s.Write(ctx, sent); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got := rcv.Events(path)
			if len(got) != len(sent) {
				t.Fatalf("sdk-go received %d events, want %d", len(got), len(sent))
			}
			for i := range sent {
				if diff := sameEvent(sent[i], got[i]); diff != "" {
					t.Errorf("event %d (%s) as sdk-go read it: %s", i, sent[i].ID(), diff)
				}
			}
			// What a receiver picks the mode from.
			posts := rcv.Posts(path)
			want := map[string]string{config.ContentModeBinary: "application/json",
				config.ContentModeStructured: httpsink.ContentTypeStructured, httpsink.ContentModeBatched: httpsink.ContentTypeBatch}[mode]
			if ct := posts[0].Header.Get("Content-Type"); ct != want {
				t.Errorf("Content-Type = %q, want %q", ct, want)
			}
			if mode == httpsink.ContentModeBatched && len(posts) != 1 {
				t.Errorf("the batched mode sent %d requests for %d events, want 1", len(posts), len(sent))
			}
			if mode == config.ContentModeBinary && posts[0].Header.Get("Ce-Datacontenttype") != "" {
				t.Error("binary mode sent ce-datacontenttype; the HTTP binding carries it in Content-Type only")
			}
		})
	}
}

func TestBinaryModePercentEncodesHeaderValuesAsTheBindingRequires(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	path := freshPath()
	s := newSink(t, &httpsink.Config{URL: rcv.URL() + path})
	ctx := connect(t, s)
	ce := interopEvents(t)[0].CloudEvent()
	ce.SetSubject(`team a/"ünï" 100%`)
	ev, err := encoding.FromCloudEvent(ce)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("changedby", "kubectl edit")
	if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	h := rcv.Posts(path)[0].Header
	for name, want := range map[string]string{
		"Ce-Subject":   "team%20a/%22%C3%BCn%C3%AF%22%20100%25",
		"Ce-Changedby": "kubectl%20edit",
		"Ce-Id":        ev.ID(),
		"Ce-Time":      "2026-03-01T12:00:00.123456789Z",
	} {
		if got := h[name]; len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}
