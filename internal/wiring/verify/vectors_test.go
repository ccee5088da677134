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

func readVector(t *testing.T, base string) ([]*event.Event, []held) {
	t.Helper()
	raw, err := os.ReadFile(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var evs []*event.Event
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		e := event.New()
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s.jsonl: %v", base, err)
		}
		evs = append(evs, &e)
	}
	want := []held{}
	if raw, err = os.ReadFile(base + ".json"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%s.json: %v", base, err)
	}
	return evs, want
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
// `kubewire verify` applies. On a known limitation, where the expected
// state is the cluster's and the rule cannot reach it, verify must end
// where the consumer package's View ends.
func TestKubewireVerifyEndsEveryConsumerVectorInItsExpectedState(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "testdata", "consumer-vectors")
	var bases []string
	for _, sub := range []string{"", "regressions", "known-limitations", "bad-records"} {
		files, err := filepath.Glob(filepath.Join(dir, sub, "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			bases = append(bases, strings.TrimSuffix(f, ".jsonl"))
		}
	}
	if len(bases) < 10 {
		t.Fatalf("found %d vectors under %s; the vectors were not found", len(bases), dir)
	}
	for _, base := range bases {
		name, _ := filepath.Rel(dir, base)
		t.Run(name, func(t *testing.T) {
			evs, want := readVector(t, base)
			v := verify.NewView()
			for _, e := range evs {
				v.Apply(e)
			}
			got := stateOf(evs, v.Objects)
			if strings.HasPrefix(name, "known-limitations") {
				cv := consumer.NewView(consumer.Options{})
				for i, e := range evs {
					cv.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, e)
				}
				want = stateOf(evs, func(r string) map[string]verify.Object {
					out := map[string]verify.Object{}
					for _, o := range cv.Objects(r) {
						out[o.Key] = verify.Object{UID: o.UID, ResourceVersion: o.ResourceVersion}
					}
					return out
				})
			}
			if !equal(got, want) {
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
