package encoding

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// structuredCorpus is every kind of event kubewire builds (every op on both
// caches, markers, every payload mode including diffs and references, the
// dispatcher's extensions) and events it never builds but a writer must
// still write faithfully: escapes, control characters, unicode, data that
// is not JSON.
func structuredCorpus(t *testing.T) map[string]*Event {
	t.Helper()
	out := map[string]*Event{}
	for i, c := range setterCases(t) {
		if e, err := New(c); err == nil {
			out["setter case "+string(rune('A'+i%26))+string(c.Op)+" "+c.Key] = e
		}
	}
	for _, c := range diffCorpus() {
		for _, payload := range shape.PayloadModes() {
			res := informer.NewResource("diff", c.kind.GVR, c.kind.Kind, c.kind.Namespaced)
			res.Payload = payload
			_, cr := bothPaths(t, res, informer.OpUpdated, c.json, c.old, c.rules)
			e, err := New(cr)
			if err != nil {
				t.Fatal(err)
			}
			e.SetExtension(ExtConflated, "3")
			e.SetExtension(ExtConflatedFrom, "17")
			out[c.name+"/"+payload] = e
			ref, err := ReferenceEvent(e)
			if err != nil {
				t.Fatal(err)
			}
			out[c.name+"/"+payload+"/reference"] = ref
		}
	}
	odd := event.New()
	odd.SetID("id \"quoted\" \\ back\tslash\n\r\x01\x1f\x7f ünï 😀 \u2028")
	odd.SetSource("/clusters/x/apis/a.b/v1/things?q=1#frag")
	odd.SetType("t")
	odd.SetSubject("ns/näme with spaces </script>&")
	odd.SetTime(time.Date(2026, 11, 25, 9, 0, 0, 1, time.FixedZone("x", 3600)))
	odd.SetDataSchema("https://example.com/schema.json")
	odd.SetDataContentType("Application/JSON; charset=utf-8")
	odd.SetExtension("zeta", "last")
	odd.SetExtension("alpha", "\x00first")
	odd.SetExtension("count", 42)
	odd.DataEncoded = []byte(`{"a":"\u2028 \\ \"x\"","b":[1,2]}`)
	out["odd attributes"] = fromCE(t, &odd)
	text := event.New()
	text.SetID("1")
	text.SetSource("/s")
	text.SetType("t")
	text.SetDataContentType("text/plain")
	text.DataEncoded = []byte("not \"json\"\n")
	out["text data"] = fromCE(t, &text)
	bare := event.New()
	bare.SetID("1")
	bare.SetSource("/s")
	bare.SetType("t")
	out["only the required attributes"] = fromCE(t, &bare)
	many := fromCE(t, &bare)
	for _, n := range []string{"x9", "x1", "y", "a", "x10", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"} {
		many.SetExtension(n, n)
	}
	out["more extensions than fit inline"] = many
	return out
}

func fromCE(t *testing.T, ev *event.Event) *Event {
	t.Helper()
	e, err := FromCloudEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAppendJSONIsWhatSDKGoWrites(t *testing.T) {
	for name, e := range structuredCorpus(t) {
		got, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.CloudEvent().MarshalJSON()
		if err != nil {
			t.Fatalf("%s: sdk-go: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if e.DataContentType() == "" || isJSONMediaType(e.DataContentType()) {
			if !json.Valid(got) {
				t.Errorf("%s: not valid JSON: %s", name, got)
			}
		}
	}
}

func TestAppendJSONAppendsWithoutAllocatingMore(t *testing.T) {
	for name, e := range structuredCorpus(t) {
		if name == "more extensions than fit inline" {
			continue
		}
		buf := make([]byte, 0, 1<<20)
		if n := testing.AllocsPerRun(50, func() { _ = e.AppendJSON(buf[:0]) }); n != 0 {
			t.Errorf("%s: AppendJSON into a large enough buffer allocates %v times", name, n)
		}
	}
}

func TestParseJSONReadsWhatAppendJSONWrites(t *testing.T) {
	for name, e := range structuredCorpus(t) {
		b := e.AppendJSON(nil)
		got, err := ParseJSON(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// AppendJSON is canonical (sorted extensions, UTC time), so equal
		// bytes are equal events.
		if g := got.AppendJSON(nil); !bytes.Equal(g, b) {
			t.Errorf("%s:\n read %s\nwrote %s", name, g, b)
		}
		viaSDK, err := parseWithSDK(b)
		if err != nil {
			// sdk-go writes a media type lowercased but reads it as it
			// is: it cannot read back data of "Application/JSON".
			t.Logf("%s: sdk-go cannot read it back: %v", name, err)
			continue
		}
		if g, w := got.AppendJSON(nil), viaSDK.AppendJSON(nil); !bytes.Equal(g, w) {
			t.Errorf("%s:\n read %s\n  sdk %s\nwrote %s", name, g, w, b)
		}
		if !bytes.Equal(got.Data(), viaSDK.Data()) {
			t.Errorf("%s: data %q, sdk-go reads %q", name, got.Data(), viaSDK.Data())
		}
	}
}

// What kubewire never writes is read as sdk-go reads it.
func TestParseJSONReadsAnyOtherEventAsSDKGoDoes(t *testing.T) {
	for name, in := range map[string]string{
		"base64 data":           `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":"AAE="}`,
		"a number extension":    `{"specversion":"1.0","id":"1","source":"/s","type":"t","count":3}`,
		"a 0.3 event":           `{"specversion":"0.3","id":"1","source":"/s","type":"t","data":{"a":1}}`,
		"a string as JSON data": `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/json","data":"x"}`,
		"text data":             `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"a\nb"}`,
	} {
		got, err := ParseJSON([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := parseWithSDK([]byte(in))
		if err != nil {
			t.Fatalf("%s: sdk-go: %v", name, err)
		}
		if g, w := got.AppendJSON(nil), want.AppendJSON(nil); !bytes.Equal(g, w) || !bytes.Equal(got.Data(), want.Data()) {
			t.Errorf("%s: read %s (data %q), sdk-go reads %s (data %q)", name, g, got.Data(), w, want.Data())
		}
	}
	for name, in := range map[string]string{
		"not JSON":       `{"specversion":"1.0",`,
		"no id":          `{"specversion":"1.0","source":"/s","type":"t"}`,
		"no specversion": `{"id":"1","source":"/s","type":"t"}`,
		"not an object":  `["specversion"]`,
	} {
		if e, err := ParseJSON([]byte(in)); err == nil {
			t.Errorf("%s: read as %s", name, e.AppendJSON(nil))
		}
	}
}

// The spool reads back up to dispatch.bufferBytes of events per sink, and
// the budget counts each event's data once: an event read back must keep one
// copy of its record's data and nothing else of the record (issue 46: a drain
// kept the whole record as well, twice the budget).
func TestParseJSONKeepsOneCopyOfTheDataAndNoneOfTheRecord(t *testing.T) {
	big := event.New()
	big.SetID("0c6a1f4e-1")
	big.SetSource("/clusters/c/api/v1/namespaces/ns/configmaps")
	big.SetType("io.kubewire.object.updated")
	big.SetSubject("ns/big")
	big.SetDataContentType("application/json")
	big.SetExtension(ExtResourceVersion, "12345")
	big.SetExtension(ExtPartitionKey, "v1/configmaps/ns/big")
	big.DataEncoded = []byte(`{"data":{"v":"` + strings.Repeat("x", 64<<10) + `"}}`)
	rec := fromCE(t, &big).AppendJSON(nil)
	var err error
	const n = 64
	kept := make([]*Event, n)
	before := liveHeap()
	for i := range kept {
		if kept[i], err = ParseJSON(rec); err != nil {
			t.Fatal(err)
		}
	}
	per := (int64(liveHeap()) - int64(before)) / n
	if data := int64(len(kept[0].Data())); per > data+data/4 {
		t.Errorf("each event read back keeps %d bytes for %d bytes of data in a record of %d", per, data, len(rec))
	}
	runtime.KeepAlive(kept)
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
