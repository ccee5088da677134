package kafka_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// binaryCorpus is every kind of event kubewire sends, and some it never
// does but a binding must still write faithfully.
func binaryCorpus(t *testing.T) map[string]*encoding.Event {
	t.Helper()
	evs := map[string]*encoding.Event{}
	for _, op := range []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpDeleted, informer.OpSynced} {
		c := sinktest.Change(op, "team-ä", "cm-1", 7)
		if op == informer.OpSynced {
			c.SnapshotID = "snap1"
		}
		evs[string(op)] = mustEvent(t, c)
		evs["cluster "+string(op)] = mustEvent(t, sinktest.ClusterChange(op, "node-✓", 8))
	}
	unknown := sinktest.Change(informer.OpDeleted, "ns", "gone", 9)
	unknown.FinalStateUnknown = true
	evs["finalstateunknown delete"] = mustEvent(t, unknown)
	for _, op := range []informer.Op{informer.OpSnapshotStarted, informer.OpSnapshotCompleted} {
		evs[string(op)] = mustEvent(t, &informer.Change{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
			SnapshotID: "snap1", Count: 3, Observed: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	}
	evs["gap"] = mustEvent(t, &informer.Change{Op: informer.OpGap, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix,
		Gap: &informer.Gap{Namespace: "team-ä", From: "3", To: "9", Reason: informer.GapExpired}, Observed: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	conflated := mustEvent(t, sinktest.Change(informer.OpUpdated, "ns", "busy", 10))
	conflated.SetExtension(encoding.ExtConflated, "4")
	conflated.SetExtension(encoding.ExtConflatedFrom, "7")
	evs["conflated"] = conflated
	ref, err := encoding.ReferenceEvent(mustEvent(t, sinktest.Change(informer.OpUpdated, "ns", "big", 11)))
	if err != nil {
		t.Fatal(err)
	}
	evs["reference"] = ref
	odd := event.New()
	odd.SetID(`id with "quotes", % and ünïcødé 😀`)
	odd.SetSource("/clusters/x/apis/a.b/v1/things?q=1#frag")
	odd.SetType("io.kubewire.object.updated")
	odd.SetSubject("ns/näme with spaces")
	odd.SetTime(time.Date(2026, 11, 25, 9, 0, 0, 1, time.FixedZone("x", 3600)))
	odd.SetDataSchema("https://example.com/schema.json")
	odd.SetExtension("partitionkey", "k/ns/näme")
	odd.SetExtension("count", 42)
	odd.SetExtension("flag", true)
	if err := odd.SetData(event.ApplicationJSON, map[string]any{"a": "\u2028 \\ \"x\""}); err != nil {
		t.Fatal(err)
	}
	evs["odd attributes and non-string extensions"] = sinktest.FromCloudEvent(t, &odd)
	noData := event.New()
	noData.SetID("1")
	noData.SetSource("/s")
	noData.SetType("t")
	evs["no data, no key, no time"] = sinktest.FromCloudEvent(t, &noData)
	return evs
}

func sortedHeaders(m kafkago.Message) []string {
	out := make([]string, 0, len(m.Headers))
	for _, h := range m.Headers {
		out = append(out, fmt.Sprintf("%s=%q", h.Key, h.Value))
	}
	slices.Sort(out)
	return out
}

func TestTheDirectEncodingIsWhatSDKGoWritesInBothModes(t *testing.T) {
	for name, ev := range binaryCorpus(t) {
		for _, structured := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/structured=%v", name, structured), func(t *testing.T) {
				got := kafka.EncodeMessage(ev, structured)
				want, err := kafka.EncodeWithSDK(ev.CloudEvent(), structured)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Key, want.Key) {
					t.Errorf("key %q, sdk-go writes %q", got.Key, want.Key)
				}
				if !bytes.Equal(got.Value, want.Value) {
					t.Errorf("value differs:\n%s\nsdk-go:\n%s", got.Value, want.Value)
				}
				// sdk-go walks the extensions map, so only the set of headers
				// is defined, not their order.
				if g, w := sortedHeaders(got), sortedHeaders(want); !slices.Equal(g, w) {
					t.Errorf("headers differ:\n%s\nsdk-go:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
				}
				if len(ev.Data()) > 0 { // sdk-go reads no data back as empty, not nil
					sameEvent(t, ev, decodeWithSDK(t, got).Event)
				}
			})
		}
	}
}

// A binary-mode record's headers are written straight from its event into
// the batch; the batch must be byte for byte what kafka-go writes for the
// headers encodeBinary builds, which the test above holds to sdk-go's. Each
// event alone, and all of them in one batch.
func TestTheBatchOfEventsIsTheBatchOfTheirMessages(t *testing.T) {
	corpus := binaryCorpus(t)
	far := event.New()
	far.SetID("far")
	far.SetSource("/far")
	far.SetType("io.kubewire.object.updated")
	far.SetTime(time.Date(12026, 1, 1, 0, 0, 0, 999999999, time.FixedZone("y", -7200)))
	corpus["time with a five-digit year"] = sinktest.FromCloudEvent(t, &far)
	var all []*encoding.Event
	for name, ev := range corpus {
		all = append(all, ev)
		t.Run(name, func(t *testing.T) { sameBatch(t, []*encoding.Event{ev}) })
	}
	t.Run("all in one batch", func(t *testing.T) { sameBatch(t, all) })
}

func sameBatch(t *testing.T, evs []*encoding.Event) {
	t.Helper()
	direct, kafkaGo, bound, err := kafka.EventBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(direct, kafkaGo) {
		i := 0
		for i < min(len(direct), len(kafkaGo)) && direct[i] == kafkaGo[i] {
			i++
		}
		t.Fatalf("the batch written from the events differs from kafka-go's at byte %d of %d (kafka-go %d)", i, len(direct), len(kafkaGo))
	}
	if len(direct) > bound {
		t.Errorf("batch of %d bytes, bound %d", len(direct), bound)
	}
}

func TestANonStringExtensionIsWrittenInItsCanonicalForm(t *testing.T) {
	ev := event.New()
	ev.SetID("1")
	ev.SetSource("/s")
	ev.SetType("t")
	ev.SetExtension("count", 42)
	m := kafka.EncodeMessage(sinktest.FromCloudEvent(t, &ev), false)
	want, _ := types.Format(int32(42))
	if h := headerMap(m)["ce_count"]; h != want {
		t.Errorf("ce_count = %q, want %q", h, want)
	}
}
