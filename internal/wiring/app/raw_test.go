package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

// comparable strips what legitimately differs between two kubewire
// processes watching the same objects: when each observed a change, and the
// snapshot ids each drew.
func comparableEvent(t *testing.T, ev event.Event) map[string]any {
	t.Helper()
	m := map[string]any{"type": ev.Type(), "source": ev.Source(), "subject": ev.Subject(),
		"datacontenttype": ev.DataContentType()}
	id := ev.ID()
	if sid := ext(ev, encoding.ExtSnapshotID); sid != "" {
		id = strings.ReplaceAll(id, sid, "<snapshot>")
	}
	m["id"] = id
	for k, v := range ev.Extensions() {
		if k != encoding.ExtSnapshotID {
			m["ext:"+k] = v
		}
	}
	var data any
	if err := json.Unmarshal(ev.Data(), &data); err != nil {
		t.Fatalf("data is not JSON: %v", err)
	}
	if d, ok := data.(map[string]any); ok && ev.Type() != encoding.TypeSnapshotStarted && ev.Type() != encoding.TypeSnapshotCompleted {
		m["data"] = d
	}
	return m
}

// TestARawCachedResourceStreamsWhatTheUnstructuredOneStreams runs two
// kubewire processes over the same objects, one with cache: raw, and
// compares their streams key by key: the initial snapshot (a WatchList
// stream on this apiserver), creates, updates, deletes, and the objects of
// namespaces that are not configured never appearing.
func TestARawCachedResourceStreamsWhatTheUnstructuredOneStreams(t *testing.T) {
	ctx := context.Background()
	nsA, nsB, nsOther := namespace(t), namespace(t), namespace(t)
	group := unique("raw") + ".example.com"
	gvr := installCRD(t, group)
	cms := kube.CoreV1().ConfigMaps

	// Objects that exist before start come through the initial snapshot.
	for _, ns := range []string{nsA, nsB, nsOther} {
		if _, err := cms(ns).Create(ctx, configMap(ns, "pre", map[string]string{"k": "caf\u00e9 \"q\" \\ \U0001F600"}, map[string]string{"a": "b"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wr := dyn.Resource(gvr).Namespace(nsA)
	pre := widget(nsA, "pre", 1)
	pre.SetAPIVersion(group + "/v1")
	if _, err := wr.Create(ctx, pre, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := func(cache string) string {
		return cfgHeader + fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s, %s], cache: %s, sinks: [out]}
  - {group: %s, version: v1, resource: widgets, cache: %s, sinks: [out]}
`, nsA, nsB, cache, group, cache)
	}
	ku := start(t, cfg("unstructured"), testcluster.AdminUser)
	kr := start(t, cfg("raw"), testcluster.AdminUser)
	synced := func(evs []event.Event) bool {
		return countCompleted(evs, "configmaps") == 1 && countCompleted(evs, "widgets."+group) == 1
	}
	ku.WaitFor(t, "the unstructured snapshots", synced)
	kr.WaitFor(t, "the raw snapshots", synced)

	for _, ns := range []string{nsA, nsB, nsOther} {
		c1, err := cms(ns).Create(ctx, configMap(ns, "cm", map[string]string{"v": "1"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit := c1.DeepCopy()
		edit.Data["v"] = "2\n\u2028"
		if _, err := cms(ns).Update(ctx, edit, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms(ns).Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w := widget(nsA, "w1", 1)
	w.SetAPIVersion(group + "/v1")
	w1, err := wr.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(w1.Object, int64(2), "spec", "size")
	if _, err := wr.Update(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wr.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	wkey := "widgets." + group + "/" + nsA + "/w1"
	done := func(evs []event.Event) bool {
		m := byKey(evs)
		return len(m["configmaps/"+nsA+"/cm"]) >= 3 && len(m["configmaps/"+nsB+"/cm"]) >= 3 && len(m[wkey]) >= 3
	}
	mu := byKey(ku.WaitFor(t, "every unstructured delete", done))
	mr := byKey(kr.WaitFor(t, "every raw delete", done))

	keys := []string{"configmaps/" + nsA + "/cm", "configmaps/" + nsB + "/cm", wkey,
		"configmaps/" + nsA + "/pre", "configmaps/" + nsB + "/pre", "widgets." + group + "/" + nsA + "/pre"}
	for _, key := range keys {
		gu, gr := mu[key], mr[key]
		if len(gu) == 0 {
			t.Errorf("%s: the unstructured path streamed nothing", key)
		}
		if len(gu) != len(gr) {
			t.Errorf("%s: unstructured streamed %d events, raw %d", key, len(gu), len(gr))
			continue
		}
		for i := range gu {
			if a, b := comparableEvent(t, gu[i]), comparableEvent(t, gr[i]); !reflect.DeepEqual(a, b) {
				t.Errorf("%s event %d differs:\nunstructured %v\nraw          %v", key, i, a, b)
			}
		}
	}
	for _, key := range []string{"configmaps/" + nsOther + "/cm", "configmaps/" + nsOther + "/pre"} {
		if n := len(mr[key]); n != 0 {
			t.Errorf("raw: a namespace that is not configured streamed %d events for %s", n, key)
		}
	}
	// changedby comes from managedFields, which the raw path cut at the
	// byte level: it must still be there.
	if got := mr["configmaps/"+nsA+"/cm"][0]; ext(got, encoding.ExtChangedBy) == "" {
		t.Errorf("raw added event has no changedby: %v", got.Extensions())
	}
}
