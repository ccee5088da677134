package shape

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	// The apimachinery decoder, as the informer's: whole numbers as int64.
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func TestPathsParseAndPrintInTheirCanonicalForm(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"status.conditions[*].lastHeartbeatTime", "status.conditions[*].lastHeartbeatTime"},
		{"metadata.annotations['example.com/x']", "metadata.annotations['example.com/x']"},
		{`data["it's"]`, `data["it's"]`},
		{"data['password']", "data.password"},
		{"spec[*][*]", "spec[*][*]"},
	} {
		p, err := ParsePath(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := p.String(); got != tc.want {
			t.Errorf("%q printed as %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMalformedPathsSayWhereAndWhy(t *testing.T) {
	for _, tc := range []struct {
		in  string
		pos int
		why string
	}{
		{"", 0, "empty"},
		{".a", 0, "starts with"},
		{"a..b", 2, "expected a field name"},
		{"a[0]", 1, "expected [*]"},
		{"a['x", 2, "unterminated"},
		{"a['x'", 5, "expected ']'"},
		{"a['']", 2, "cannot be empty"},
		{"a b", 1, "unexpected"},
	} {
		_, err := ParsePath(tc.in)
		var pe *PathError
		if !errors.As(err, &pe) {
			t.Errorf("%q: got %v, want a *PathError", tc.in, err)
			continue
		}
		if pe.Pos != tc.pos || !strings.Contains(pe.Reason, tc.why) {
			t.Errorf("%q: got %v, want offset %d and %q", tc.in, err, tc.pos, tc.why)
		}
	}
}

func TestTheSecretTransformDigestsValuesRemovesLastAppliedAndRecordsTheNewestManager(t *testing.T) {
	obj := decode(t, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","annotations":{
		"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"aHVudGVyMg==\"}}","keep":"me"},
		"managedFields":[
		  {"manager":"kubectl-client-side-apply","operation":"Update","time":"2026-01-01T00:00:00Z"},
		  {"manager":"my-controller","operation":"Update","time":"2026-01-01T00:00:05Z"},
		  {"manager":"helm","operation":"Apply","time":"2026-01-01T00:00:03Z"}]},
		"data":{"password":"aHVudGVyMg=="},"stringData":{"token":"abc"}}`)
	tr := NewTransform(true, SecretRules())
	u := &unstructured.Unstructured{Object: obj}
	for range 2 { // idempotent: client-go may transform an object twice
		if _, err := tr(u); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := Marshal(u.Object)
	for _, secret := range []string{"hunter2", "aHVudGVyMg", "abc", "last-applied", "managedFields", PrivateKey} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("public object contains %q: %s", secret, raw)
		}
	}
	// sha256("hunter2"): the digest is of the decoded value.
	if got := u.Object["data"].(map[string]any)["password"]; got != "sha256:f52fbd32b2b3b86ff88ef6c490628285f482af15ddcb29541f94bcf526a3f6c7" {
		t.Errorf("data.password = %v", got)
	}
	if u.GetAnnotations()["keep"] != "me" {
		t.Errorf("other annotations were touched: %v", u.GetAnnotations())
	}
	cb, ok := ChangedByOf(u.Object)
	if !ok || cb != (ChangedBy{Manager: "my-controller", Operation: "Update", Time: "2026-01-01T00:00:05Z"}) {
		t.Errorf("changedBy = %+v, %v", cb, ok)
	}
}

func TestDigestsChangeWhenTheValueChanges(t *testing.T) {
	a, b := digest(base64.StdEncoding.EncodeToString([]byte("v1")), true), digest(base64.StdEncoding.EncodeToString([]byte("v2")), true)
	if a == b || !isDigest(a) || !isDigest(b) {
		t.Fatalf("digests %s and %s", a, b)
	}
}

func TestRedactRulesDigestOrRemoveEveryMatchInMapsAndLists(t *testing.T) {
	obj := decode(t, `{"data":{"password":"p","user":"u"},"spec":{"containers":[{"env":"x","image":"i"},{"env":"y","image":"j"}]},"list":[1,2]}`)
	Redact(obj, []Rule{
		{Path: MustParsePath("data['password']"), Mode: RedactDigest},
		{Path: MustParsePath("spec.containers[*].env"), Mode: RedactRemove},
		{Path: MustParsePath("list[*]"), Mode: RedactRemove},
		{Path: MustParsePath("no.such[*].path"), Mode: RedactRemove},
	})
	got, _ := json.Marshal(obj)
	want := `{"data":{"password":"` + digest("p", false) + `","user":"u"},"list":[],"spec":{"containers":[{"image":"i"},{"image":"j"}]}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestAnObjectWithoutManagedFieldsHasNoProvenance(t *testing.T) {
	if _, ok := ChangedByOf(decode(t, `{"metadata":{"name":"x"}}`)); ok {
		t.Fatal("got a provenance from nothing")
	}
	// keepManagedFields: derived on demand from the entries.
	cb, ok := ChangedByOf(decode(t, `{"metadata":{"managedFields":[{"manager":"a","operation":"Apply","time":"2026-01-01T00:00:00Z"}]}}`))
	if !ok || cb.Manager != "a" {
		t.Fatalf("got %+v", cb)
	}
}

func TestFiltersSeeObjectOldObjectAndType(t *testing.T) {
	obj := decode(t, `{"metadata":{"name":"a","labels":{"team":"payments"}},"spec":{"replicas":3}}`)
	old := decode(t, `{"metadata":{"name":"a","labels":{"team":"payments"}},"spec":{"replicas":2}}`)
	for _, tc := range []struct {
		expr     string
		typ      string
		old      map[string]any
		want     bool
		wantsErr bool
	}{
		{"object.metadata.labels['team'] == 'payments' && type != 'deleted'", "added", nil, true, false},
		{"object.metadata.labels['team'] == 'payments' && type != 'deleted'", "deleted", nil, false, false},
		{"object.spec.replicas > oldObject.spec.replicas", "updated", old, true, false},
		{"oldObject == null", "added", nil, true, false},
		{"object.metadata.labels['missing'] == 'x'", "added", nil, true, true},
		{"has(object.metadata.labels.missing)", "added", nil, false, false},
		{"object['" + PrivateKey + "'] != null", "added", nil, true, true},
	} {
		f, err := CompileFilter(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		o := obj
		if strings.Contains(tc.expr, PrivateKey) {
			o = decode(t, `{"@kubewire.changedBy":{"manager":"m"}}`)
		}
		got, err := f.Match(tc.typ, o, tc.old)
		if got != tc.want || (err != nil) != tc.wantsErr {
			t.Errorf("%s on %s: got %v, %v; want %v (error %v)", tc.expr, tc.typ, got, err, tc.want, tc.wantsErr)
		}
	}
}

func TestBadFiltersAreRejectedWithPositionAndReason(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"object.metadata.name ==", "line 1, column 24: Syntax error"},
		{"1 + 'a'", "line 1, column 3: found no matching overload for '_+_'"},
		{"'text'", "yields string; a filter must yield bool"},
		{"object.metadata.name", "yields dyn (a value whose type is only known at run time); a filter must yield bool"},
		{"nosuchvar == 1", "undeclared reference to 'nosuchvar'"},
	} {
		_, err := CompileFilter(tc.expr)
		var fe *FilterError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) || fe.Expr != tc.expr {
			t.Errorf("%q: got %v, want a *FilterError with %q", tc.expr, err, tc.want)
		}
	}
}

func TestNoOpUpdatesAndUpdatesOnlyUnderIgnoredPathsAreSuppressed(t *testing.T) {
	base := `{"metadata":{"name":"n","resourceVersion":"%s","annotations":{"x":"%s","y":"1"},"generation":%s},
		"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":"%s","status":"%s"}]}}`
	obj := func(rv, x, gen, hb, status string) map[string]any {
		s := base
		for _, v := range []string{rv, x, gen, hb, status} {
			s = strings.Replace(s, "%s", v, 1)
		}
		return decode(t, s)
	}
	ignore := []Path{MustParsePath("status.conditions[*].lastHeartbeatTime"), MustParsePath("metadata.annotations['x']")}
	old := obj("1", "a", "1", "t1", "True")
	for _, tc := range []struct {
		name   string
		s      *Suppressor
		new    map[string]any
		reason string
	}{
		{"only the resourceVersion changed", NewSuppressor(UpdatesChanged, nil), obj("2", "a", "1", "t1", "True"), ReasonUnchanged},
		{"a heartbeat changed, not ignored", NewSuppressor(UpdatesChanged, nil), obj("2", "a", "1", "t2", "True"), ""},
		{"a heartbeat changed, ignored", NewSuppressor(UpdatesChanged, ignore), obj("2", "a", "1", "t2", "True"), ReasonIgnored},
		{"an ignored annotation changed", NewSuppressor(UpdatesChanged, ignore), obj("2", "b", "1", "t1", "True"), ReasonIgnored},
		{"a real field changed next to an ignored one", NewSuppressor(UpdatesChanged, ignore), obj("2", "a", "1", "t2", "False"), ""},
		{"all mode never suppresses", NewSuppressor(UpdatesAll, nil), obj("2", "a", "1", "t1", "True"), ""},
		{"generation unchanged", NewSuppressor(UpdatesGenerationChanged, nil), obj("2", "a", "1", "t1", "False"), ReasonGeneration},
		{"generation changed", NewSuppressor(UpdatesGenerationChanged, nil), obj("2", "a", "2", "t1", "True"), ""},
	} {
		reason, ok := tc.s.Suppress(old, tc.new)
		if reason != tc.reason || ok != (tc.reason != "") {
			t.Errorf("%s: got %q, %v; want %q", tc.name, reason, ok, tc.reason)
		}
	}
}

func TestUnchangedAndGenerationAgreeWithTheSuppressorTheyStandIn(t *testing.T) {
	old := decode(t, `{"metadata":{"name":"n","resourceVersion":"1","generation":1},"data":{"v":"a"}}`)
	changed, generation := NewSuppressor(UpdatesChanged, nil), NewSuppressor(UpdatesGenerationChanged, nil)
	for _, s := range []string{
		`{"metadata":{"name":"n","resourceVersion":"2","generation":1},"data":{"v":"a"}}`,
		`{"metadata":{"name":"n","resourceVersion":"2","generation":1},"data":{"v":"a"},"` + PrivateKey + `":{"manager":"m"}}`,
		`{"metadata":{"name":"n","resourceVersion":"2","generation":1},"data":{"v":"b"}}`,
		`{"metadata":{"name":"n","resourceVersion":"2","generation":2},"data":{"v":"a"}}`,
		`{"metadata":{"name":"n","resourceVersion":"2"},"data":{"v":"a"}}`,
	} {
		cur := decode(t, s)
		if _, want := changed.Suppress(old, cur); Unchanged(old, cur) != want {
			t.Errorf("Unchanged of %s is %v, the suppressor says %v", s, !want, want)
		}
		if _, want := generation.Suppress(old, cur); (Generation(old) == Generation(cur)) != want {
			t.Errorf("the generations of %s compare unlike the suppressor's (%v)", s, want)
		}
	}
}

func TestAMapThatAppearsHoldingOnlyIgnoredPathsIsNoChange(t *testing.T) {
	s := NewSuppressor(UpdatesChanged, []Path{MustParsePath("metadata.annotations['hb']")})
	old := decode(t, `{"metadata":{"name":"a"}}`)
	for _, tc := range []struct {
		new  string
		want bool
	}{
		{`{"metadata":{"name":"a","annotations":{"hb":"1"}}}`, true},
		{`{"metadata":{"name":"a","annotations":{}}}`, true},
		{`{"metadata":{"name":"a","annotations":{"hb":"1","other":"x"}}}`, false},
		{`{"metadata":{"name":"a","labels":{}}}`, false},
	} {
		if _, ok := s.Suppress(old, decode(t, tc.new)); ok != tc.want {
			t.Errorf("%s: suppressed %v, want %v", tc.new, ok, tc.want)
		}
		if _, ok := s.Suppress(decode(t, tc.new), old); ok != tc.want {
			t.Errorf("%s, reversed: suppressed %v, want %v", tc.new, ok, tc.want)
		}
	}
}

func TestAConditionAddedUnderAnIgnoredPathIsStillAChange(t *testing.T) {
	s := NewSuppressor(UpdatesChanged, []Path{MustParsePath("status.conditions[*].lastHeartbeatTime")})
	old := decode(t, `{"status":{"conditions":[{"lastHeartbeatTime":"a"}]}}`)
	new := decode(t, `{"status":{"conditions":[{"lastHeartbeatTime":"a"},{"lastHeartbeatTime":"b"}]}}`)
	if _, ok := s.Suppress(old, new); ok {
		t.Fatal("a new list element was suppressed")
	}
}

func TestWildcardAndNamedIgnoresCombine(t *testing.T) {
	s := NewSuppressor(UpdatesChanged, []Path{MustParsePath("metadata.annotations[*].a"), MustParsePath("metadata.annotations['k'].b")})
	old := decode(t, `{"metadata":{"annotations":{"k":{"a":1,"b":1,"c":1}}}}`)
	for _, tc := range []struct {
		new  string
		want bool
	}{
		{`{"metadata":{"annotations":{"k":{"a":2,"b":2,"c":1}}}}`, true},
		{`{"metadata":{"annotations":{"k":{"a":1,"b":1,"c":2}}}}`, false},
	} {
		if _, ok := s.Suppress(old, decode(t, tc.new)); ok != tc.want {
			t.Errorf("%s: suppressed %v, want %v", tc.new, ok, tc.want)
		}
	}
}

func TestInvolvedKeysNameTheObjectAnEventIsAbout(t *testing.T) {
	core := decode(t, `{"involvedObject":{"kind":"Pod","namespace":"ns","name":"web-1","apiVersion":"v1"}}`)
	if k, ok := InvolvedKey(core, "involvedObject"); !ok || k != "Pod/ns/web-1" {
		t.Errorf("core: %q %v", k, ok)
	}
	ev := decode(t, `{"regarding":{"kind":"Deployment","namespace":"ns","name":"web","apiVersion":"apps/v1"}}`)
	if k, ok := InvolvedKey(ev, "regarding"); !ok || k != "Deployment.apps/ns/web" {
		t.Errorf("events.k8s.io: %q %v", k, ok)
	}
	node := decode(t, `{"involvedObject":{"kind":"Node","name":"n1"}}`)
	if k, ok := InvolvedKey(node, "involvedObject"); !ok || k != "Node/n1" {
		t.Errorf("cluster-scoped: %q %v", k, ok)
	}
	if _, ok := InvolvedKey(decode(t, `{}`), "involvedObject"); ok {
		t.Error("an Event about nothing got a key")
	}
}

func TestReferenceAndDiffPayloadsLeaveThePrivateKeyOut(t *testing.T) {
	old := decode(t, `{"metadata":{"name":"a","resourceVersion":"1"},"spec":{"x":1},"@kubewire.changedBy":{"manager":"m"}}`)
	cur := decode(t, `{"metadata":{"name":"a","resourceVersion":"2"},"spec":{"x":2},"@kubewire.changedBy":{"manager":"m"}}`)
	data, err := Diff(old, cur)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "@kubewire") {
		t.Fatalf("diff leaks the private key: %s", data)
	}
	var d struct {
		Object map[string]any   `json:"object"`
		Patch  []map[string]any `json:"patch"`
	}
	if err := json.Unmarshal(data, &d); err != nil || len(d.Patch) != 2 {
		t.Fatalf("diff %s: %v", data, err)
	}
	data, _ = Diff(nil, cur)
	if strings.Contains(string(data), `"patch"`) {
		t.Fatalf("a non-update carries a patch: %s", data)
	}
}
