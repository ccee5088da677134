package nats

import (
	"bytes"
	"context"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// TestTheDirectBinaryMessageIsWhatSDKGoWrites holds binaryMessage, which
// builds the message straight from kubewire's event, to sdk-go's JetStream
// binding writing the same event's CloudEvent. sdk-go does not
// percent-encode header values (the NATS binding says to, 3.1.3.2) and
// keeps the time's zone, so values are compared decoded, and times as
// instants.
func TestTheDirectBinaryMessageIsWhatSDKGoWrites(t *testing.T) {
	corpus := map[string]*encoding.Event{}
	for _, op := range []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpDeleted, informer.OpSynced} {
		c := sinktest.Change(op, "team-ä", "cm 1", 7)
		c.SnapshotID = "snap1"
		ev, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		corpus[string(op)] = ev
		if ev, err = encoding.New(sinktest.ClusterChange(op, "node-✓", 8)); err != nil {
			t.Fatal(err)
		}
		corpus["cluster "+string(op)] = ev
	}
	marker, err := encoding.New(&informer.Change{Op: informer.OpSnapshotCompleted, Resource: sinktest.Resource,
		Key: sinktest.Resource.KeyPrefix, SnapshotID: "snap1", Count: 3, Observed: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	marker.SetExtension(encoding.ExtIncomplete, "2")
	corpus["incomplete marker"] = marker
	odd := event.New()
	odd.SetID(`id "quoted" 50% ünï 😀`)
	odd.SetSource("/clusters/x/apis/a.b/v1/things?q=1")
	odd.SetType("t")
	odd.SetSubject("ns/näme with spaces")
	odd.SetTime(time.Date(2026, 11, 25, 9, 0, 0, 1, time.FixedZone("x", 3600)))
	odd.SetDataSchema("https://example.com/schema.json")
	odd.SetDataContentType("application/json")
	odd.SetExtension("count", 42)
	odd.SetExtension("flag", true)
	odd.SetExtension("text", "a b\tc")
	corpus["odd attributes and non-string extensions"] = sinktest.FromCloudEvent(t, &odd)
	bare := event.New()
	bare.SetID("1")
	bare.SetSource("/s")
	bare.SetType("t")
	corpus["only the required attributes"] = sinktest.FromCloudEvent(t, &bare)

	for name, ev := range corpus {
		t.Run(name, func(t *testing.T) {
			got := binaryMessage("subj", ev)
			var data bytes.Buffer
			want, err := cejs.WriteMsg(context.Background(), binding.ToMessage(ev.CloudEvent()), &data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Header) != len(want) {
				t.Errorf("headers:\n%v\nwant\n%v", got.Header, want)
			}
			for name, w := range want {
				g, err := encoding.DecodeHeaderValue(got.Header.Get(name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if name == HeaderPrefix+"time" {
					gt, gerr := time.Parse(time.RFC3339Nano, g)
					wt, werr := time.Parse(time.RFC3339Nano, w[0])
					if gerr != nil || werr != nil || !gt.Equal(wt) {
						t.Errorf("%s = %q, sdk-go writes %q", name, g, w[0])
					}
					continue
				}
				if g != w[0] {
					t.Errorf("%s = %q (%q as sent), sdk-go writes %q", name, g, got.Header.Get(name), w[0])
				}
			}
			if got.Subject != "subj" || !bytes.Equal(got.Data, data.Bytes()) {
				t.Errorf("subject %q or data %q differ from sdk-go's %q", got.Subject, got.Data, data.Bytes())
			}
		})
	}
}

// Nats-Msg-Id is the event's id as it is, which JetStream deduplicates on,
// whether or not ce-id had to percent-encode it; when ce-id did not, the two
// headers share their value.
func TestTheMessageIDIsTheEventIDAsItIs(t *testing.T) {
	for _, id := range []string{"uid-1/42/updated", `id "quoted" 50% ünï`} {
		ce := event.New()
		ce.SetID(id)
		ce.SetSource("/s")
		ce.SetType("t")
		m := binaryMessage("subj", sinktest.FromCloudEvent(t, &ce))
		got := msgID(m.Header, id)
		if len(got) != 1 || got[0] != id {
			t.Errorf("Nats-Msg-Id of %q = %q, want [%q]", id, got, id)
		}
		if shared := &got[0] == &m.Header[headerID][0]; shared != (m.Header.Get(headerID) == id) {
			t.Errorf("id %q: ce-id %q, value shared with Nats-Msg-Id: %v", id, m.Header.Get(headerID), shared)
		}
	}
}
