package nats

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func TestTheFastBinaryMessageIsTheOneTheEventsAccessorsGive(t *testing.T) {
	corpus := map[string]*event.Event{}
	for _, op := range []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpDeleted, informer.OpSynced} {
		c := sinktest.Change(op, "team-ä", "cm 1", 7)
		c.SnapshotID = "snap1"
		ev, err := encoding.Event(c)
		if err != nil {
			t.Fatal(err)
		}
		corpus[string(op)] = ev
		if ev, err = encoding.Event(sinktest.ClusterChange(op, "node-✓", 8)); err != nil {
			t.Fatal(err)
		}
		corpus["cluster "+string(op)] = ev
	}
	marker, err := encoding.Event(&informer.Change{Op: informer.OpSnapshotCompleted, Resource: sinktest.Resource,
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
	corpus["odd attributes and non-string extensions"] = &odd
	bare := event.New()
	bare.SetID("1")
	bare.SetSource("/s")
	bare.SetType("t")
	corpus["only the required attributes"] = &bare

	for name, ev := range corpus {
		t.Run(name, func(t *testing.T) {
			got, err := binaryMessage("subj", ev)
			if err != nil {
				t.Fatal(err)
			}
			want, err := binaryMessageOf("subj", ev)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(got.Header, want.Header, slices.Equal) {
				t.Errorf("headers:\n%v\nwant\n%v", got.Header, want.Header)
			}
			if got.Subject != want.Subject || string(got.Data) != string(want.Data) {
				t.Errorf("subject or data differ")
			}
		})
	}
}
