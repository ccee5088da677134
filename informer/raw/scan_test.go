package raw

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// scanGJSON is the oracle of scanFast: wherever the single pass answers, it
// must answer what gjson finds.
func checkScan(t *testing.T, in []byte) (fast bool) {
	t.Helper()
	s := str(in)
	got, ok := scanFast(s, false)
	checked, checkedOK := scanFast(s, true)
	if ok != checkedOK || !reflect.DeepEqual(checked, got) {
		t.Errorf("validating, the single pass gives %+v, %v; without, %+v, %v", checked, checkedOK, got, ok)
	}
	if !ok {
		return false
	}
	want := scanGJSON(s, true)
	// New reads a member as a string only if it is one, and generation as
	// a number only if it is one: other values are all alike to it.
	same := func(a, b gjson.Result) bool {
		if (a.Type == gjson.String) != (b.Type == gjson.String) || (a.Type == gjson.Number) != (b.Type == gjson.Number) {
			return false
		}
		switch a.Type {
		case gjson.String:
			return a.Str == b.Str && a.Index == b.Index && a.Raw == b.Raw
		case gjson.Number:
			return a.Int() == b.Int()
		}
		return true
	}
	for _, f := range []struct {
		name      string
		got, want gjson.Result
	}{
		{"name", got.name, want.name}, {"namespace", got.namespace, want.namespace}, {"uid", got.uid, want.uid},
		{"resourceVersion", got.resourceVersion, want.resourceVersion}, {"generation", got.generation, want.generation},
	} {
		if !same(f.got, f.want) {
			t.Errorf("%s: single pass %+v, gjson %+v", f.name, f.got, f.want)
		}
	}
	if got.managedFields != want.managedFields || (got.managedFields >= 0 && got.managedFieldsEnd != want.managedFieldsEnd) {
		t.Errorf("managedFields at [%d,%d), gjson [%d,%d)", got.managedFields, got.managedFieldsEnd, want.managedFields, want.managedFieldsEnd)
	}
	if got.changedBy != want.changedBy || got.hasChangedBy != want.hasChangedBy {
		t.Errorf("changedBy %+v %v, gjson %+v %v", got.changedBy, got.hasChangedBy, want.changedBy, want.hasChangedBy)
	}
	if got.hasKind != want.hasKind || got.hasAPIVersion != want.hasAPIVersion {
		t.Errorf("kind/apiVersion %v/%v, gjson %v/%v", got.hasKind, got.hasAPIVersion, want.hasKind, want.hasAPIVersion)
	}
	return true
}

func TestTheSinglePassReadsWhatGJSONReads(t *testing.T) {
	for _, in := range append(seeds(), scanSeeds...) {
		checkScan(t, in)
	}
}

// The objects the apiserver serves take the single pass, not the fallback.
func TestServedObjectsTakeTheSinglePass(t *testing.T) {
	objs := [][]byte{benchdata.ReferencePod()}
	for _, k := range benchdata.Kinds {
		objs = append(objs, k.JSON(benchdata.DefaultSeed, 1, 5))
	}
	for _, in := range objs {
		if !checkScan(t, in) {
			t.Errorf("fell back to gjson for %.60s…", in)
		}
	}
}

// scanSeeds are shapes aimed at the single pass: repeated keys, escapes
// where it reads and where it skips, values of other types.
var scanSeeds = [][]byte{
	[]byte(`{"metadata":{"name":"a"},"metadata":{"name":"b"},"kind":"K","kind":""}`),
	[]byte(`{"kind":"","apiVersion":5,"metadata":5,"metadata":{"name":"b"}}`),
	[]byte(`{"metadata":{"name":"a","name":"b","generation":1.5,"uid":null,"resourceVersion":["1"]}}`),
	[]byte(`{"metadata":{"name":"a\"b","labels":{"x\u0041":"<\u003c>"}}}`),
	[]byte(`{"meta\u0064ata":{"name":"a"}}`),
	[]byte(`{"metadata":{"annotations":{"k":"v\\\\"},"name":"after \\\\ escapes"}}`),
	[]byte(`{"metadata":{"managedFields":{"a":{"manager":"m","time":"2024-01-02T03:04:05Z"}}}}`),
	[]byte(`{"metadata":{"managedFields":[1,"x",null,{"manager":"m","operation":"Apply","time":"2024-01-02T03:04:05Z","fieldsV1":{"f:a":{".":{},"f:\"b\"":{}}}}]}}`),
	[]byte(`{"metadata":{"managedFields":[{"manager":"m","time":5},{"manager":"n","time":"2024-01-02T03:04:05Z"}],"managedFields":null}}`),
	[]byte(`{"metadata":{"generation":-3,"generation":true},"data":{"a":[1,2,{"b":"]}"}]}}`),
	[]byte(" {\"metadata\" :\t{ \"name\" : \"a\" , \"generation\" : 2e3 } } "),
}

// FuzzScan compares the single pass with gjson on random valid objects.
// `go test -fuzz FuzzScan ./informer/raw` explores further.
func FuzzScan(f *testing.F) {
	for _, s := range append(seeds(), scanSeeds...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			// Validating, the single pass must turn it down; New then
			// refuses it.
			if _, ok := scanFast(str(in), true); ok {
				t.Fatalf("the validating pass accepts %q", in)
			}
			if bytes.HasPrefix(bytes.TrimLeft(in, " \t\r\n"), []byte("{")) {
				if _, err := New(in, BuildOptions{Validate: true}); !errors.Is(err, ErrInvalid) {
					t.Fatalf("New(%q) with Validate: %v, want ErrInvalid", in, err)
				}
			}
			return
		}
		checkScan(t, in)
	})
}
