package verify_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

// held is one object of a vector's expected state.
type held struct {
	Key             string `json:"key"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// line is one record of a vector: an event or a tombstone read from a
// partition at a position, or a hand-over (see the vectors' README.md).
type line struct {
	Partition string          `json:"partition"`
	Offset    *int64          `json:"offset"`
	Event     json.RawMessage `json:"event"`
	Tombstone string          `json:"tombstone"`
	Handover  string          `json:"handover"`
	ev        *event.Event
}

func readVector(t *testing.T, base string) ([]line, []held) {
	t.Helper()
	raw, err := os.ReadFile(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var ls []line
	next := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l line
		if bytes.Contains(b, []byte(`"specversion"`)) && !bytes.HasPrefix(b, []byte(`{"partition"`)) {
			l.Event = append(json.RawMessage(nil), b...)
		} else if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("%s.jsonl: %v", base, err)
		}
		if l.Handover == "" {
			if l.Partition == "" {
				l.Partition = "p0"
			}
			if l.Offset == nil {
				o := next[l.Partition]
				l.Offset = &o
			}
			next[l.Partition] = max(next[l.Partition], *l.Offset+1)
		}
		if l.Event != nil {
			e := event.New()
			if err := json.Unmarshal(l.Event, &e); err != nil {
				t.Fatalf("%s.jsonl: %v", base, err)
			}
			l.ev = &e
		}
		ls = append(ls, l)
	}
	want := []held{}
	if raw, err = os.ReadFile(base + ".json"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%s.json: %v", base, err)
	}
	return ls, want
}

// stateOf is what v holds of every resource evs name, sorted by key.
func stateOf(evs []*event.Event, objects func(resource string) map[string]verify.Object) []held {
	resources := map[string]bool{}
	for _, e := range evs {
		if k, ok := e.Extensions()[encoding.ExtPartitionKey].(string); ok {
			r, _, _ := strings.Cut(k, "/")
			resources[r] = true
		}
	}
	out := []held{}
	for r := range resources {
		for k, o := range objects(r) {
			out = append(out, held{Key: k, UID: o.UID, ResourceVersion: o.ResourceVersion})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// TestKubewireVerifyEndsEveryConsumerVectorInItsExpectedState runs the
// shared conformance vectors (testdata/consumer-vectors) through the view
// `kubewire verify` applies, one View across a vector's partitions, each
// record at its position: it must end in the expected state. Vectors with
// hand-overs are skipped: verify reads a whole topic, never in a group.
func TestKubewireVerifyEndsEveryConsumerVectorInItsExpectedState(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "testdata", "consumer-vectors")
	var bases []string
	for _, sub := range []string{"", "regressions", "bad-records"} {
		files, err := filepath.Glob(filepath.Join(dir, sub, "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			bases = append(bases, strings.TrimSuffix(f, ".jsonl"))
		}
	}
	if len(bases) < 24 {
		t.Fatalf("found %d vectors under %s; the vectors were not found", len(bases), dir)
	}
	for _, base := range bases {
		name, _ := filepath.Rel(dir, base)
		t.Run(name, func(t *testing.T) {
			ls, want := readVector(t, base)
			var evs []*event.Event
			for _, l := range ls {
				if l.Handover != "" {
					// verify reads a whole topic, never as a member of a
					// consumer group.
					t.Skip("a hand-over of a consumer group")
				}
				if l.ev != nil {
					evs = append(evs, l.ev)
				}
			}
			v := verify.NewView()
			for _, l := range ls {
				pos := consumer.Position{Partition: l.Partition, Offset: *l.Offset}
				if l.ev == nil {
					v.DeleteAt(pos, l.Tombstone)
					continue
				}
				v.ApplyAt(pos, l.ev)
			}
			if got := stateOf(evs, v.Objects); !equal(got, want) {
				t.Fatalf("verify's view ends in %v, want %v", got, want)
			}
		})
	}
}

func equal(a, b []held) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
