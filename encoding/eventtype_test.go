package encoding_test

import (
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

func TestExtensionsBeyondTheInlineOnesAreKeptInOrder(t *testing.T) {
	e, err := encoding.FromCloudEvent(minimal())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		e.SetExtension("x"+strconv.Itoa(i), strconv.Itoa(i))
	}
	e.SetExtension("X3", "three") // names are lowercased, and a set name keeps its place
	e.SetExtension("x33", "thirty-three")
	if e.Len() != n {
		t.Fatalf("Len = %d, want %d", e.Len(), n)
	}
	for i := range n {
		want := strconv.Itoa(i)
		switch i {
		case 3:
			want = "three"
		case 33:
			want = "thirty-three"
		}
		if x := e.At(i); x.Name != "x"+strconv.Itoa(i) || x.Value != want {
			t.Errorf("At(%d) = %v, want x%d=%s", i, x, i, want)
		}
		if v, ok := e.Lookup("x" + strconv.Itoa(i)); !ok || v != want {
			t.Errorf("Lookup(x%d) = %q %v", i, v, ok)
		}
	}
	if _, ok := e.Lookup("absent"); ok {
		t.Error("an extension never set is found")
	}
}

// A dispatcher clones a shared event to add its own extensions: the other
// sinks must not see them, whether they land inline or beyond.
func TestACloneCanBeChangedWithoutChangingTheOriginal(t *testing.T) {
	for _, base := range []int{0, 15, 16, 30} {
		e, err := encoding.FromCloudEvent(minimal())
		if err != nil {
			t.Fatal(err)
		}
		for i := range base {
			e.SetExtension("x"+strconv.Itoa(i), "v")
		}
		before := e.Extensions()
		a, b := e.Clone(), e.Clone()
		a.SetExtension(encoding.ExtConflated, "2")
		b.SetExtension(encoding.ExtIncomplete, "1")
		if base > 0 {
			a.SetExtension("x0", "changed")
		}
		if got := e.Extensions(); !reflect.DeepEqual(got, before) {
			t.Errorf("%d extensions: the original changed to %v", base, got)
		}
		if _, ok := a.Lookup(encoding.ExtIncomplete); ok {
			t.Errorf("%d extensions: one clone sees the other's extension", base)
		}
		if b.Extension(encoding.ExtIncomplete) != "1" || a.Extension(encoding.ExtConflated) != "2" {
			t.Errorf("%d extensions: a clone lost its own extension", base)
		}
	}
}

func TestFromCloudEventAndBackIsTheSameEvent(t *testing.T) {
	ev := minimal()
	ev.SetSubject("team-a/x")
	ev.SetDataSchema("https://example.com/schema")
	ev.SetTime(time.Date(2026, 11, 25, 1, 2, 3, 4, time.UTC))
	ev.SetExtension("partitionkey", "configmaps/team-a/x")
	ev.SetExtension("count", 3) // sdk-go's canonical string, as every binding writes it
	ev.DataEncoded = []byte(`{"a":"ü"}`)
	e, err := encoding.FromCloudEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if e.Extension("count") != "3" || e.Subject() != "team-a/x" || e.DataSchema() != "https://example.com/schema" || string(e.Data()) != `{"a":"ü"}` {
		t.Fatalf("got %v", e)
	}
	want := ev.Clone()
	want.SetExtension("count", "3")
	if got := e.CloudEvent(); !reflect.DeepEqual(got, &want) {
		t.Errorf("round trip:\n got %s\nwant %s", got, &want)
	}
}

func TestFromCloudEventRefusesAnInvalidEvent(t *testing.T) {
	noID := event.New()
	noID.SetType("t")
	noID.SetSource("/s")
	if _, err := encoding.FromCloudEvent(&noID); err == nil {
		t.Error("an event without an id was accepted")
	}
}

// TestNewAllocatesTheEventOnly pins what New costs on the raw cache in the
// full payload mode, where the data is the cached bytes: one allocation,
// for the event with its extensions and id. Building sdk-go's event.Event
// instead took 12.
func TestNewAllocatesTheEventOnly(t *testing.T) {
	for _, k := range benchdata.Kinds {
		c := benchRawChange(k)
		if _, err := encoding.New(c); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(200, func() { _, _ = encoding.New(c) }); n > 1 {
			t.Errorf("%s: New allocates %v times per event, want 1", k.Name, n)
		}
	}
}

func minimal() *event.Event {
	ev := event.New()
	ev.SetID("id-1")
	ev.SetType(encoding.TypeAdded)
	ev.SetSource("/clusters/c/api/v1/configmaps")
	return &ev
}

// An id too long for the event's own buffer is still whole, and a clone
// keeps the id of the event it was cloned from.
func TestAnIDOfAnyLengthIsKeptWhole(t *testing.T) {
	for _, uid := range []string{"u", strings.Repeat("u", 200)} {
		c := benchRawChange(benchdata.ConfigMaps)
		c.Object = informer.FromUnstructured(func() *unstructured.Unstructured {
			u := benchdata.ConfigMaps.Cached(benchdata.DefaultSeed, 0, 2)
			u.SetUID(types.UID(uid))
			return u
		}())
		c.SnapshotID = "snap"
		c.Op = informer.OpSynced
		e, err := encoding.New(c)
		if err != nil {
			t.Fatal(err)
		}
		want := uid + "/2/synced/snap"
		clone := e.Clone()
		e = nil
		runtime.GC()
		if clone.ID() != want {
			t.Errorf("id %q, want %q", clone.ID(), want)
		}
	}
}
