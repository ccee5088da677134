package shape

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// randValue builds a random JSON value of at most depth levels, as the
// apimachinery decoder would produce it (int64 for whole numbers).
func randValue(r *rand.Rand, depth int) any {
	k := r.IntN(7)
	if depth <= 0 {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return fmt.Sprintf("s%d", r.IntN(5))
	case 1:
		return int64(r.IntN(5))
	case 2:
		return r.IntN(2) == 0
	case 3:
		return nil
	case 4, 5:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randKey(r)] = randValue(r, depth-1)
		}
		return m
	default:
		l := []any{}
		for range r.IntN(4) {
			l = append(l, randValue(r, depth-1))
		}
		return l
	}
}

// Keys include the characters RFC 6901 must escape.
func randKey(r *rand.Rand) string {
	return []string{"a", "b", "c/d", "e~f", "g.h", "0"}[r.IntN(6)]
}

// edit changes v in place at a random depth: set, delete or replace a key;
// insert, remove or replace a list element.
func edit(r *rand.Rand, v any) any {
	switch c := v.(type) {
	case map[string]any:
		if len(c) > 0 && r.IntN(3) > 0 {
			for k := range c { // descend into one random child
				c[k] = edit(r, c[k])
				return c
			}
		}
		k := randKey(r)
		if r.IntN(3) == 0 {
			delete(c, k)
		} else {
			c[k] = randValue(r, 2)
		}
		return c
	case []any:
		switch {
		case len(c) > 0 && r.IntN(3) == 0:
			i := r.IntN(len(c))
			c[i] = edit(r, c[i])
			return c
		case len(c) > 0 && r.IntN(2) == 0:
			i := r.IntN(len(c))
			return append(c[:i], c[i+1:]...)
		default:
			i := r.IntN(len(c) + 1)
			return append(c[:i], append([]any{randValue(r, 2)}, c[i:]...)...)
		}
	default:
		return randValue(r, 2)
	}
}

func deepCopy(t *testing.T, v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(b))
}

// Applying the emitted patch to the previous emitted object gives the new
// object, checked with a second, independent JSON Patch implementation.
func TestApplyingTheDiffPatchToThePreviousObjectYieldsTheNewOne(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const cases = 2000
	changed := 0
	for i := range cases {
		old := map[string]any{"metadata": map[string]any{"name": "x"}, "spec": randValue(r, 4)}
		cur := deepCopy(t, old)
		for range 1 + r.IntN(4) {
			cur = edit(r, cur).(map[string]any)
		}
		data, err := Diff(old, cur)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		var d DiffData
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("case %d: data %s: %v", i, data, err)
		}
		if string(d.Patch) != "[]" {
			changed++
		}
		patch, err := jsonpatch.DecodePatch(d.Patch)
		if err != nil {
			t.Fatalf("case %d: patch %s: %v", i, d.Patch, err)
		}
		prev, _ := Marshal(old)
		got, err := patch.Apply(prev)
		if err != nil {
			t.Fatalf("case %d: apply %s to %s: %v", i, d.Patch, prev, err)
		}
		var gotV, wantV, objV any
		_ = json.Unmarshal(got, &gotV)
		want, _ := Marshal(cur)
		_ = json.Unmarshal(want, &wantV)
		_ = json.Unmarshal(d.Object, &objV)
		if !reflect.DeepEqual(gotV, wantV) || !reflect.DeepEqual(objV, wantV) {
			t.Fatalf("case %d:\nold   %s\npatch %s\ngot   %s\nwant  %s", i, prev, d.Patch, got, want)
		}
	}
	// Guard the generator: a property that holds because nothing changed
	// proves nothing.
	if changed < cases/2 {
		t.Fatalf("only %d of %d cases changed anything", changed, cases)
	}
}
