package encoding

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/shape"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// unicodePod has the strings that trip byte-level code: escapes, unicode
// escapes, characters outside the BMP and HTML characters encoding/json
// would escape.
const unicodePod = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"caf\u00e9-p","namespace":"ns","uid":"u-1","resourceVersion":"9",` +
	`"labels":{"emoji":"\ud83d\ude00"},"annotations":{"note":"line1\nline2\t\"quoted\" \\ <b>&amp;</b> \u2028 日本語"},` +
	`"managedFields":[{"manager":"kube\u0063tl","operation":"Apply","apiVersion":"v1","time":"2024-05-06T07:08:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{}}}]},` +
	`"spec":{"containers":[{"name":"c","image":"x","args":["a\\b","\u0000"]}]}}`

type diffCase struct {
	name string
	kind benchdata.Kind
	json []byte
	// old is the previous state, for updates.
	old []byte
	// rules is the redaction both paths apply before caching.
	rules []shape.Rule
}

// secretJSON is a Secret as kubectl apply leaves it: data, the
// last-applied annotation holding the same values, and managedFields.
func secretJSON(rv int, password string) []byte {
	b64 := base64.StdEncoding.EncodeToString([]byte(password))
	return []byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db","namespace":"ns","uid":"u-s","resourceVersion":"` + strconv.Itoa(rv) + `",` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"` + b64 + `\"}}","team":"a"},` +
		`"managedFields":[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"v1","time":"2024-05-06T07:08:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]},` +
		`"data":{"password":"` + b64 + `","user":"YWRtaW4="},"type":"Opaque"}`)
}

var secrets = benchdata.Kind{Name: "secret", GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret", Namespaced: true}

func diffCorpus() []diffCase {
	var cs []diffCase
	for _, k := range benchdata.Kinds {
		for i := range 3 {
			cs = append(cs, diffCase{name: k.Name, kind: k, json: k.JSON(benchdata.DefaultSeed, i, 10), old: k.JSON(benchdata.DefaultSeed, i, 9)})
		}
	}
	cs = append(cs,
		diffCase{name: "secret-redacted", kind: secrets, json: secretJSON(10, "s3cret-new"), old: secretJSON(9, "s3cret-old"), rules: shape.SecretRules()},
		diffCase{name: "reference-pod", kind: benchdata.Pods, json: benchdata.ReferencePod()},
		diffCase{name: "unicode", kind: benchdata.Pods, json: []byte(unicodePod)},
	)
	return cs
}

// bothPaths builds the change of op for in on the unstructured path (the
// informer's decoding and transform) and on the raw path.
func bothPaths(t *testing.T, res *informer.Resource, op informer.Op, in, old []byte, rules []shape.Rule) (*informer.Change, *informer.Change) {
	t.Helper()
	transform := shape.NewTransform(true, rules)
	opts := raw.BuildOptions{}
	if len(rules) > 0 {
		opts.Rewrite = func(m map[string]any) { shape.Redact(m, rules) }
	}
	decode := func(b []byte) *unstructured.Unstructured {
		u := benchdata.Decode(b)
		if _, err := transform(u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	u := decode(in)
	r, err := raw.New(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	cu := &informer.Change{Op: op, Resource: res, Key: res.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: now}
	cr := &informer.Change{Op: op, Resource: res, Key: res.ObjectKey(r.GetNamespace(), r.GetName()), Object: informer.FromRaw(r), Observed: now}
	if op == informer.OpSynced {
		cu.SnapshotID, cr.SnapshotID = "snap", "snap"
	}
	if old != nil {
		cu.OldObject = informer.FromUnstructured(decode(old))
		ro, err := raw.New(old, opts)
		if err != nil {
			t.Fatal(err)
		}
		cr.OldObject = informer.FromRaw(ro)
	}
	return cu, cr
}

func attributes(ev *Event) map[string]any {
	m := map[string]any{
		"id": ev.ID(), "source": ev.Source(), "type": ev.Type(), "subject": ev.Subject(),
		"time": ev.Time(), "datacontenttype": ev.DataContentType(), "specversion": ev.SpecVersion(),
	}
	for k, v := range ev.Extensions() {
		m["ext:"+k] = v
	}
	return m
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("data is not JSON: %v\n%s", err, b)
	}
	return v
}

// TestRawAndUnstructuredPathsEmitEqualEvents is the differential test of
// issue 9: for every object of the corpus, every op and payload mode, the
// two cache paths emit the same attributes and data equal as JSON.
func TestRawAndUnstructuredPathsEmitEqualEvents(t *testing.T) {
	for _, c := range diffCorpus() {
		for _, payload := range shape.PayloadModes() {
			for _, op := range []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpDeleted, informer.OpSynced} {
				t.Run(c.name+"/"+payload+"/"+string(op), func(t *testing.T) {
					res := informer.NewResource("diff", c.kind.GVR, c.kind.Kind, c.kind.Namespaced)
					res.Payload = payload
					var old []byte
					if op == informer.OpUpdated {
						old = c.old
					}
					cu, cr := bothPaths(t, res, op, c.json, old, c.rules)
					eu, err := New(cu)
					if err != nil {
						t.Fatal(err)
					}
					er, err := New(cr)
					if err != nil {
						t.Fatal(err)
					}
					if au, ar := attributes(eu), attributes(er); !reflect.DeepEqual(au, ar) {
						t.Errorf("attributes differ:\nunstructured %v\nraw          %v", au, ar)
					}
					if du, dr := jsonValue(t, eu.Data()), jsonValue(t, er.Data()); !reflect.DeepEqual(du, dr) {
						t.Errorf("data differs:\nunstructured %s\nraw          %s", eu.Data(), er.Data())
					}
					if c.rules != nil {
						for _, leak := range []string{"s3cret", base64.StdEncoding.EncodeToString([]byte("s3cret-new")), base64.StdEncoding.EncodeToString([]byte("s3cret-old")), "last-applied"} {
							if strings.Contains(string(er.Data()), leak) {
								t.Errorf("raw event data carries %q: %s", leak, er.Data())
							}
						}
					}
				})
			}
		}
	}
}
