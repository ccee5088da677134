package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

const cfgHeader = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: test
sinks:
  - name: out
    type: stdout
resources:
`

// want is one expected event of an object.
type want struct {
	op  string
	obj metav1.Object
}

// checkSequence asserts the exact sequence of events of one object: types,
// deterministic ids, source, subject, partitionkey and data.
func checkSequence(t *testing.T, got []event.Event, source, key string, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		var types []string
		for _, ev := range got {
			types = append(types, ev.Type())
		}
		t.Fatalf("%s: got %d events %v, want %d", key, len(got), types, len(wants))
	}
	prevRV := ""
	for i, w := range wants {
		ev := got[i]
		if ev.Type() != encoding.TypePrefix+"object."+w.op {
			t.Errorf("%s event %d: type %s, want %s", key, i, ev.Type(), w.op)
		}
		rv := ext(ev, encoding.ExtResourceVersion)
		if w.obj != nil && w.op != "deleted" && rv != w.obj.GetResourceVersion() {
			t.Errorf("%s event %d: resourceversion %s, want %s", key, i, rv, w.obj.GetResourceVersion())
		}
		if prevRV != "" && len(rv) <= len(prevRV) && rv <= prevRV {
			t.Errorf("%s event %d: resourceversion went from %s to %s", key, i, prevRV, rv)
		}
		prevRV = rv
		wantID := fmt.Sprintf("%s/%s/%s", w.obj.GetUID(), rv, w.op)
		if ev.ID() != wantID {
			t.Errorf("%s event %d: id %q, want %q", key, i, ev.ID(), wantID)
		}
		if ev.Source() != source {
			t.Errorf("%s event %d: source %q, want %q", key, i, ev.Source(), source)
		}
		subject := w.obj.GetName()
		if ns := w.obj.GetNamespace(); ns != "" {
			subject = ns + "/" + subject
		}
		if ev.Subject() != subject {
			t.Errorf("%s event %d: subject %q, want %q", key, i, ev.Subject(), subject)
		}
		if got := ext(ev, encoding.ExtPartitionKey); got != key {
			t.Errorf("%s event %d: partitionkey %q", key, i, got)
		}
		if ev.DataContentType() != event.ApplicationJSON {
			t.Errorf("%s event %d: datacontenttype %q", key, i, ev.DataContentType())
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data(), &data); err != nil {
			t.Fatalf("%s event %d: data is not JSON: %v", key, i, err)
		}
		u := unstructured.Unstructured{Object: data}
		if u.GetName() != w.obj.GetName() || u.GetUID() != w.obj.GetUID() || u.GetResourceVersion() != rv {
			t.Errorf("%s event %d: data is object %s/%s rv %s", key, i, u.GetName(), u.GetUID(), u.GetResourceVersion())
		}
		if u.GetManagedFields() != nil {
			t.Errorf("%s event %d: managedFields were not stripped", key, i)
		}
	}
}

func TestConfigMapsInTwoNamespacesAndCustomResourcesStreamTheirExactSequences(t *testing.T) {
	ctx := context.Background()
	nsA, nsB, nsOther := namespace(t), namespace(t), namespace(t)
	group := unique("seq") + ".example.com"
	gvr := installCRD(t, group)
	k := start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s, %s], sinks: [out]}
  - {group: %s, version: v1, resource: widgets, sinks: [out]}
`, nsA, nsB, group), testcluster.AdminUser)
	k.WaitFor(t, "both initial snapshots", func(evs []event.Event) bool {
		return countCompleted(evs, "configmaps") == 1 && countCompleted(evs, "widgets."+group) == 1
	})

	cms := kube.CoreV1().ConfigMaps
	var wantCM = map[string][]want{}
	for _, ns := range []string{nsA, nsB, nsOther} {
		c1, err := cms(ns).Create(ctx, configMap(ns, "cm", map[string]string{"v": "1"}, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit := c1.DeepCopy()
		edit.Data["v"] = "2"
		c2, err := cms(ns).Update(ctx, edit, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cms(ns).Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wantCM[ns] = []want{{"added", c1}, {"updated", c2}, {"deleted", c2}}
	}

	wr := dyn.Resource(gvr).Namespace(nsA)
	w := widget(nsA, "w1", 1)
	w.SetAPIVersion(group + "/v1")
	w1, err := wr.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(w1.Object, int64(2), "spec", "size")
	w2, err := wr.Update(ctx, w1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	wkey := "widgets." + group + "/" + nsA + "/w1"
	evs := k.WaitFor(t, "every delete", func(evs []event.Event) bool {
		m := byKey(evs)
		return len(m["configmaps/"+nsA+"/cm"]) >= 3 && len(m["configmaps/"+nsB+"/cm"]) >= 3 && len(m[wkey]) >= 3
	})
	m := byKey(evs)
	for _, ns := range []string{nsA, nsB} {
		checkSequence(t, m["configmaps/"+ns+"/cm"], "/clusters/test/api/v1/configmaps", "configmaps/"+ns+"/cm", wantCM[ns])
	}
	if got := m["configmaps/"+nsOther+"/cm"]; len(got) != 0 {
		t.Errorf("a namespace that is not configured streamed %d events", len(got))
	}
	checkSequence(t, m[wkey], "/clusters/test/apis/"+group+"/v1/widgets", wkey,
		[]want{{"added", w1}, {"updated", w2}, {"deleted", w2}})

	// The data is the object as the informer saw it at each step.
	var first map[string]any
	_ = json.Unmarshal(m["configmaps/"+nsA+"/cm"][0].Data(), &first)
	if v, _, _ := unstructured.NestedString(first, "data", "v"); v != "1" {
		t.Errorf("added event carries data.v=%q, want 1", v)
	}
	for _, ev := range m[wkey] {
		if ext(ev, encoding.ExtKind) != "Widget" || ext(ev, encoding.ExtAPIVersion) != group+"/v1" || ext(ev, encoding.ExtCluster) != "test" {
			t.Errorf("widget event extensions: %v", ev.Extensions())
		}
	}
}

func TestARestartEmitsASnapshotOfSyncedRecordsAndNoAdds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for i := range 5 {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, fmt.Sprintf("cm%d", i), nil, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cfgHeader + fmt.Sprintf("  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}\n", ns)

	for run := 1; run <= 2; run++ {
		k := start(t, cfg, testcluster.AdminUser)
		evs := k.WaitFor(t, "the initial snapshot", completed("configmaps"))
		k.Shutdown(t)
		evs = k.Events(t)
		if len(evs) != 7 {
			t.Fatalf("run %d: got %d events, want started + 5 synced + completed", run, len(evs))
		}
		if evs[0].Type() != encoding.TypeSnapshotStarted || evs[6].Type() != encoding.TypeSnapshotCompleted {
			t.Fatalf("run %d: snapshot is not framed by its markers: first %s, last %s", run, evs[0].Type(), evs[6].Type())
		}
		sid := ext(evs[0], encoding.ExtSnapshotID)
		var marker struct{ Count *int }
		_ = json.Unmarshal(evs[6].Data(), &marker)
		if ext(evs[6], encoding.ExtSnapshotID) != sid || marker.Count == nil || *marker.Count != 5 {
			t.Fatalf("run %d: completed marker %s with data %s does not close snapshot %s with count 5", run, evs[6].ID(), evs[6].Data(), sid)
		}
		for _, ev := range evs[1:6] {
			if ev.Type() != encoding.TypeSynced {
				t.Errorf("run %d: %s inside the snapshot, want only synced records", run, ev.Type())
			}
			if ext(ev, encoding.ExtSnapshotID) != sid || !strings.HasSuffix(ev.ID(), "/synced/"+sid) {
				t.Errorf("run %d: record id %q does not name snapshot %s", run, ev.ID(), sid)
			}
		}
	}
}

func TestNamespaceLabelAndFieldSelectorsKeepOnlyMatchingObjects(t *testing.T) {
	ctx := context.Background()
	nsX, nsY, nsZ := namespace(t), namespace(t), namespace(t)
	k := start(t, cfgHeader+fmt.Sprintf(`
  - version: v1
    resource: configmaps
    namespaces: [%s, %s]
    labelSelector: app=keep
    fieldSelector: metadata.name!=skip
    sinks: [out]
`, nsX, nsY), testcluster.AdminUser)
	k.WaitFor(t, "the initial snapshot", completed("configmaps"))
	keep := map[string]string{"app": "keep"}
	for _, ns := range []string{nsX, nsY, nsZ} {
		for name, labels := range map[string]map[string]string{"match": keep, "skip": keep, "unlabelled": nil, "other": {"app": "other"}} {
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, name, nil, labels), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A marker object created last in each watched namespace: once it is
	// seen, everything created before it in that namespace has been too.
	for _, ns := range []string{nsX, nsY} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "last", nil, keep), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evs := k.WaitFor(t, "the last objects", func(evs []event.Event) bool {
		m := byKey(evs)
		return len(m["configmaps/"+nsX+"/last"]) > 0 && len(m["configmaps/"+nsY+"/last"]) > 0
	})
	var keys []string
	for key := range byKey(evs) {
		keys = append(keys, key)
	}
	want := map[string]bool{
		"configmaps/" + nsX + "/match": true, "configmaps/" + nsX + "/last": true,
		"configmaps/" + nsY + "/match": true, "configmaps/" + nsY + "/last": true,
	}
	if len(keys) != len(want) {
		t.Fatalf("streamed keys %v, want exactly %v", keys, want)
	}
	for _, key := range keys {
		if !want[key] {
			t.Errorf("streamed %s, which the selectors exclude", key)
		}
	}
}

func TestACRDInstalledAfterStartIsPickedUpWhileTheRestStreams(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	group := unique("late") + ".example.com"
	k := start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
  - {group: %s, version: v1, resource: widgets, sinks: [out]}
`, ns, group), testcluster.AdminUser)
	k.WaitLog(t, "is not served by the cluster", "widgets."+group)

	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "meanwhile", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.WaitFor(t, "configmaps to stream while the CRD is missing", has("configmaps/"+ns+"/meanwhile", "added"))

	gvr := installCRD(t, group)
	k.WaitFor(t, "the widgets informer to sync", completed("widgets."+group))
	w := widget(ns, "late", 1)
	w.SetAPIVersion(group + "/v1")
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := k.WaitFor(t, "the custom resource", has("widgets."+group+"/"+ns+"/late", "added"))
	if got := byKey(evs)["widgets."+group+"/"+ns+"/late"][0].Type(); got != encoding.TypeAdded {
		t.Errorf("first widget event is %s, want added", got)
	}
}

func TestAResourceThatMayNotBeListedIsReportedClearlyWhileOthersStream(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	// The limited user may read configmaps in ns, and nothing else.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: limitedUser}},
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(metrics.InformerErrors.WithLabelValues("secrets", "forbidden"))
	k := start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
  - {version: v1, resource: secrets, namespaces: [%s], sinks: [out]}
`, ns, ns), limitedUser)
	line := k.WaitLog(t, "permission denied", "resource=secrets", "verb=watch", "namespace="+ns)
	t.Logf("log line: %s", line)
	if testutil.ToFloat64(metrics.InformerErrors.WithLabelValues("secrets", "forbidden")) <= before {
		t.Error("kubewire_informer_errors_total{resource=secrets,reason=forbidden} did not move")
	}
	k.WaitFor(t, "the configmaps snapshot", completed("configmaps"))
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "allowed", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.WaitFor(t, "configmaps to stream", has("configmaps/"+ns+"/allowed", "added"))
}

func TestShutdownLeavesNoGoroutineBehind(t *testing.T) {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		// client-go keeps HTTP connections to the apiserver pooled per
		// transport for the life of the process; they are not ours.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}
	ns := namespace(t)
	k := start(t, cfgHeader+fmt.Sprintf("  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}\n", ns), testcluster.AdminUser)
	k.WaitFor(t, "the initial snapshot", completed("configmaps"))
	k.Shutdown(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
