package raw

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/tidwall/gjson"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// seeds are the corpus of the fuzz test, and the cases of the unit tests:
// objects as the apiserver serves them, and the awkward shapes valid JSON
// allows.
func seeds() [][]byte {
	s := [][]byte{
		benchdata.ReferencePod(),
		[]byte(`{}`),
		[]byte(` { } `),
		[]byte(`{"metadata":{}}`),
		[]byte(`{"metadata":{"managedFields":[]}}`),
		[]byte(`{"metadata":{"name":"a","managedFields":[{"manager":"m","operation":"Update","time":"2024-01-02T03:04:05Z"}]}}`),
		[]byte(`{"metadata":{"managedFields":[{"manager":"m","time":"2024-01-02T03:04:05Z"}],"name":"a"}}`),
		[]byte(`{"metadata":{"managedFields":[{"manager":"m","time":"2024-01-02T03:04:05Z"}],"resourceVersion":"12"}}`),
		[]byte(`{"metadata":{"resourceVersion":"1\u0032","name":"escaped"}}`),
		[]byte("{\n  \"metadata\" : {\n    \"name\" : \"x\" ,\n    \"managedFields\" : [ ]\n  } ,\n  \"spec\":1\n}\n"),
		[]byte(`{"metadata":{"name":"caf\u00e9 \"q\" \\ \ud83d\ude00","namespace":"n\/s","uid":"u","resourceVersion":"7","generation":12,"labels":{"a\u0062":"c\n"}}}`),
		[]byte(`{"metadata":{"name":"日本語","annotations":{"k":"v"},"deletionTimestamp":"2024-01-02T03:04:05Z","generation":9007199254740993}}`),
		[]byte(`{"metadata":{"managedFields":[{"manager":"old","operation":"Apply","time":"2024-01-02T03:04:05Z"},{"manager":"new","operation":"Update","time":"2024-01-02T03:04:06Z"},{"manager":"bad","time":"nope"}]}}`),
		[]byte(`{"kind":"Widget","metadata":{"name":"w","managedFields":null},"data":{"managedFields":[1]}}`),
	}
	for _, k := range benchdata.Kinds {
		s = append(s, k.JSON(benchdata.DefaultSeed, 1, 5))
	}
	return s
}

// want is what encoding/json finds in an object: the metadata fields the
// raw path extracts.
type want struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Generation        int64             `json:"generation"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
	} `json:"metadata"`
}

// fieldNames are the JSON names of the fields want decodes, by their lower
// case.
var fieldNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"metadata", "name", "namespace", "uid", "resourceVersion", "generation", "labels", "annotations", "deletionTimestamp"} {
		m[strings.ToLower(n)] = n
	}
	return m
}()

// uniqueKeys reports whether no object in b repeats a key. encoding/json
// keeps the last of repeated keys and gjson finds the first; the apiserver
// never repeats one, so such inputs are outside the contract; as are keys
// that name a field in another case (see fieldNames).
func uniqueKeys(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		keys  map[string]bool
		inObj bool
		key   bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.inObj && top.key
		if top != nil && top.inObj {
			top.key = !top.key
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, inObj: true, key: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].inObj {
					// The closed container was a value: a key comes next.
					stack[len(stack)-1].key = true
				}
			}
		case string:
			if isKey {
				if top.keys[t] {
					return false
				}
				top.keys[t] = true
				// encoding/json also matches a field's name in another
				// case, which neither the apiserver nor gjson does.
				if c, ok := fieldNames[strings.ToLower(t)]; ok && c != t {
					return false
				}
			}
		}
	}
}

// check compares New's result with encoding/json on in.
func check(t *testing.T, in []byte, keep bool) {
	t.Helper()
	var full map[string]any
	if json.Unmarshal(in, &full) != nil || !uniqueKeys(in) {
		t.Skip("not a JSON object with unique keys")
	}
	var w want
	metaOK := json.Unmarshal(in, &w) == nil
	orig := append([]byte(nil), in...)
	o, err := New(in, BuildOptions{KeepManagedFields: keep})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !bytes.Equal(in, orig) {
		t.Fatal("New modified its input")
	}
	if !json.Valid(o.JSON) {
		t.Fatalf("result is not valid JSON: %s", o.JSON)
	}
	var got map[string]any
	if err := json.Unmarshal(o.JSON, &got); err != nil {
		t.Fatal(err)
	}
	if md, ok := full["metadata"].(map[string]any); ok && !keep {
		delete(md, "managedFields")
	}
	if !reflect.DeepEqual(got, full) {
		t.Fatalf("bytes after the cut differ from the original minus managedFields:\n got %s\nfrom %s", o.JSON, in)
	}
	if !metaOK {
		return // a field of the wrong type: encoding/json has no answer to compare with
	}
	m := w.Metadata
	for _, c := range []struct{ field, got, want string }{
		{"name", o.GetName(), m.Name}, {"namespace", o.GetNamespace(), m.Namespace},
		{"uid", string(o.GetUID()), m.UID}, {"resourceVersion", o.GetResourceVersion(), m.ResourceVersion},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, encoding/json finds %q", c.field, c.got, c.want)
		}
	}
	checkKeys(t, in, o, keep)
	checkRVSpan(t, o)
	if withTM, err := New(in, BuildOptions{KeepManagedFields: keep, TypeMeta: []byte(`"kind":"K","apiVersion":"v1"`)}); err != nil {
		t.Fatal(err)
	} else {
		checkRVSpan(t, withTM)
	}
	if o.GetGeneration() != m.Generation {
		t.Errorf("generation = %d, encoding/json finds %d", o.GetGeneration(), m.Generation)
	}
	if got := o.GetLabels(); !(len(got) == 0 && len(m.Labels) == 0) && !reflect.DeepEqual(got, m.Labels) {
		t.Errorf("labels = %v, encoding/json finds %v", got, m.Labels)
	}
	if got := o.GetAnnotations(); !(len(got) == 0 && len(m.Annotations) == 0) && !reflect.DeepEqual(got, m.Annotations) {
		t.Errorf("annotations = %v, encoding/json finds %v", got, m.Annotations)
	}
	if got := o.GetDeletionTimestamp(); (got == nil) != (m.DeletionTimestamp == nil) ||
		(got != nil && !got.Equal(m.DeletionTimestamp)) {
		t.Errorf("deletionTimestamp = %v, encoding/json finds %v", got, m.DeletionTimestamp)
	}
}

// checkRVSpan compares the span New recorded for the resourceVersion with
// where gjson finds it in the result.
func checkRVSpan(t *testing.T, o *Object) {
	t.Helper()
	r := gjson.GetBytes(o.JSON, "metadata.resourceVersion")
	i, j, ok := o.ResourceVersionSpan()
	if !ok {
		if r.Type == gjson.String && len(r.Raw) == len(r.Str)+2 {
			t.Errorf("no resourceVersion span, but gjson finds the plain string %s at %d", r.Raw, r.Index)
		}
		return
	}
	if i != r.Index || j != r.Index+len(r.Raw) {
		t.Errorf("resourceVersion span [%d,%d) = %q, gjson finds %s at %d", i, j, o.JSON[i:j], r.Raw, r.Index)
	}
}

// checkKeys compares the keys New builds with client-go's key function and
// kubewire's key format, and checks that building the partition key into
// the object leaves its bytes as they were.
func checkKeys(t *testing.T, in []byte, o *Object, keep bool) {
	t.Helper()
	want, err := cache.MetaNamespaceKeyFunc(o)
	if err != nil {
		t.Fatal(err)
	}
	if o.Key() != want {
		t.Errorf("Key = %q, cache.MetaNamespaceKeyFunc says %q", o.Key(), want)
	}
	p, err := New(in, BuildOptions{KeepManagedFields: keep, KeyPrefix: "widgets.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.JSON, o.JSON) || cap(p.JSON) != len(p.JSON) {
		t.Errorf("the key prefix changed the bytes or left them spare capacity: %s", p.JSON)
	}
	if p.Key() != want {
		t.Errorf("with a prefix, Key = %q, want %q", p.Key(), want)
	}
	for _, prefix := range []string{"widgets.example.com", "widgets", "pods"} {
		if got := p.PrefixedKey(prefix); got != prefix+"/"+want {
			t.Errorf("PrefixedKey(%q) = %q, want %q", prefix, got, prefix+"/"+want)
		}
	}
}

func TestNewMatchesEncodingJSONOnTheCorpus(t *testing.T) {
	for i, s := range seeds() {
		for _, keep := range []bool{false, true} {
			t.Run(strings.ReplaceAll(string(s[:min(len(s), 40)]), "/", "_")+map[bool]string{true: "/keep"}[keep], func(t *testing.T) {
				_ = i
				check(t, s, keep)
			})
		}
	}
}

// FuzzNew feeds random JSON to New. Its seed corpus runs in every `go test`;
// `go test -fuzz FuzzNew ./informer/raw` explores further.
func FuzzNew(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, in []byte, keep bool) {
		check(t, in, keep)
	})
}

// The partition key is built into the object's own allocation: asking
// for it is free on every event, and building it costs New nothing more.
func TestTheKeysCostNoAllocation(t *testing.T) {
	in := benchdata.Pods.JSON(benchdata.DefaultSeed, 1, 5)
	opt := BuildOptions{KeyPrefix: "pods"}
	var o *Object
	without := testing.AllocsPerRun(100, func() { o, _ = New(in, BuildOptions{}) })
	with := testing.AllocsPerRun(100, func() { o, _ = New(in, opt) })
	if with != without {
		t.Errorf("New allocates %v times with a key prefix, %v without", with, without)
	}
	var key string
	if n := testing.AllocsPerRun(100, func() { key = o.PrefixedKey("pods") }); n != 0 {
		t.Errorf("PrefixedKey of the built prefix allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { key = o.Key() }); n != 0 || key != o.GetNamespace()+"/"+o.GetName() {
		t.Errorf("Key = %q, %v allocations", key, n)
	}
}

func TestChangedByIsTheNewestEntryAndSurvivesTheCut(t *testing.T) {
	o, err := New([]byte(`{"metadata":{"managedFields":[`+
		`{"manager":"kubectl","operation":"Apply","time":"2024-01-02T03:04:06Z"},`+
		`{"manager":"ctrl\u0021","operation":"Update","time":"2024-01-02T03:04:06Z"},`+
		`{"manager":"older","operation":"Update","time":"2024-01-02T03:04:05Z"}]}}`), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cb, ok := o.ChangedBy()
	// A tie goes to the later entry, as shape.ChangedByOf decides.
	if want := (ChangedBy{Manager: "ctrl!", Operation: "Update", Time: "2024-01-02T03:04:06Z"}); !ok || cb != want {
		t.Fatalf("ChangedBy = %+v, %v; want %+v", cb, ok, want)
	}
	if string(o.JSON) != `{"metadata":{}}` {
		t.Fatalf("JSON = %s", o.JSON)
	}
	if cap(o.JSON) != len(o.JSON) {
		t.Fatal("JSON has spare capacity: an append by a sink would write into the provenance strings")
	}
}

func TestListItemsWithoutTypeMetaGetTheListsKindAndAPIVersion(t *testing.T) {
	body := []byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"c"},"items":[` +
		`{"metadata":{"name":"a","namespace":"x","resourceVersion":"40"}},` +
		`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"y"}},{}]}`)
	l, err := ParseList(body, BuildOptions{}, func(ns string) bool { return ns != "y" })
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "42" || l.Continue != "c" || len(l.Items) != 2 {
		t.Fatalf("list = rv %q continue %q, %d items", l.ResourceVersion, l.Continue, len(l.Items))
	}
	if got := string(l.Items[0].JSON); got != `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"x","resourceVersion":"40"}}` {
		t.Errorf("item 0 = %s", got)
	}
	if got := string(l.Items[1].JSON); got != `{"kind":"Pod","apiVersion":"v1"}` {
		t.Errorf("item 2 = %s", got)
	}
	// The list must not pin the response: each item is its own allocation.
	body[len(body)-5] = 'X'
	if got := string(l.Items[0].JSON); strings.Contains(got, "X") {
		t.Error("an item aliases the list response")
	}
}

func TestWatchDecoderPassesBookmarksAndErrorsThrough(t *testing.T) {
	stream := `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5","managedFields":[]}}}
{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}` +
		// Frames need no newline between them.
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (6)","reason":"Expired","code":410}}`
	d := NewWatchDecoder(io.NopCloser(strings.NewReader(stream)), BuildOptions{})
	typ, obj, err := d.Decode()
	if err != nil || typ != watch.Added || obj.(*Object).GetName() != "a" || string(obj.(*Object).JSON) != `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}` {
		t.Fatalf("first event = %v %v %v", typ, obj, err)
	}
	first := typ
	typ, obj, err = d.Decode()
	if first != watch.Added {
		t.Fatalf("the first event's type changed to %q when the next frame was read", first)
	}
	if err != nil || typ != watch.Bookmark || obj.(*Object).GetResourceVersion() != "6" ||
		obj.(*Object).GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("bookmark = %v %v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	st, ok := obj.(*metav1.Status)
	if err != nil || typ != watch.Error || !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("error event = %v %#v %v", typ, obj, err)
	}
	if _, _, err = d.Decode(); err != io.EOF {
		t.Fatalf("end of stream = %v, want io.EOF", err)
	}
}
