package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

// secretEncodings are every form in which a value could leak: plain, and
// base64 as Secret data and the last-applied annotation carry it.
func secretEncodings(v string) []string {
	b := []byte(v)
	return []string{v,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b)}
}

func dataOf(t *testing.T, ev event.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Data(), &m); err != nil {
		t.Fatalf("data of %s: %v", ev.ID(), err)
	}
	return m
}

// A Secret made as kubectl apply makes it (with the last-applied annotation
// holding its data), updated, seen again by a restart's snapshot, and
// deleted: no event of either kubewire run carries any of its values.
func TestSecretValuesNeverLeaveKubewireInAnyEncoding(t *testing.T) {
	for _, cache := range []string{"unstructured", "raw"} {
		t.Run("cache "+cache, func(t *testing.T) { secretValuesNeverLeave(t, cache) })
	}
}

func secretValuesNeverLeave(t *testing.T, cache string) {
	ctx := context.Background()
	ns := namespace(t)
	cfg := cfgHeader + fmt.Sprintf("  - {version: v1, resource: secrets, namespaces: [%s], cache: %s, sinks: [out]}\n", ns, cache)
	k1 := start(t, cfg, testcluster.AdminUser)
	k1.WaitFor(t, "the initial snapshot", completed("secrets"))

	first, second := "first-secret-value-7f3a", "second-secret-value-91bc"
	lastApplied := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":%q},"data":{"password":%q}}`,
		ns, base64.StdEncoding.EncodeToString([]byte(first)))
	s, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": lastApplied}},
		Data: map[string][]byte{"password": []byte(first)},
	}, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte(second)
	s.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = strings.Replace(lastApplied,
		base64.StdEncoding.EncodeToString([]byte(first)), base64.StdEncoding.EncodeToString([]byte(second)), 1)
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: "secret-rotator"}); err != nil {
		t.Fatal(err)
	}
	key := "secrets/" + ns + "/db"
	k1.WaitFor(t, "added and updated", has(key, "added", "updated"))

	// A second kubewire sees the Secret in its initial snapshot.
	k2 := start(t, cfg, testcluster.AdminUser)
	k2.WaitFor(t, "the synced record", has(key, "synced"))
	if err := kube.CoreV1().Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	evs1 := k1.WaitFor(t, "the delete", has(key, "added", "updated", "deleted"))
	k2.WaitFor(t, "the delete", has(key, "synced", "deleted"))

	for run, raw := range []string{k1.Out.String(), k2.Out.String()} {
		for _, v := range []string{first, second} {
			for _, enc := range secretEncodings(v) {
				if strings.Contains(raw, enc) {
					t.Errorf("run %d: the output contains %q (an encoding of %q)", run+1, enc, v)
				}
			}
		}
		if strings.Contains(raw, "last-applied-configuration") {
			t.Errorf("run %d: the last-applied annotation was not removed", run+1)
		}
	}

	got := byKey(evs1)[key]
	digest := func(ev event.Event) string {
		d, _ := dataOf(t, ev)["data"].(map[string]any)
		p, _ := d["password"].(string)
		return p
	}
	added, updated := digest(got[0]), digest(got[1])
	if !strings.HasPrefix(added, "sha256:") || !strings.HasPrefix(updated, "sha256:") || added == updated {
		t.Errorf("digests: added %q, updated %q; want two different sha256 digests", added, updated)
	}
	if by := ext(got[1], encoding.ExtChangedBy); by != "secret-rotator" {
		t.Errorf("changedby of the update = %q, want secret-rotator", by)
	}
}

// ConfigMaps with a label filter (which fails at runtime on an object
// without labels), ignorePaths and the default no-op suppression, changed by
// a server-side apply with its own field manager and by a plain update.
func TestConfigMapsAreFilteredSuppressedAndAttributed(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	k := start(t, cfgHeader+fmt.Sprintf(`  - version: v1
    resource: configmaps
    namespaces: [%s]
    filter: "object.metadata.labels['team'] != 'search'"
    ignorePaths: ["metadata.annotations['heartbeat']"]
    sinks: [out]
`, ns), testcluster.AdminUser)
	k.WaitFor(t, "the initial snapshot", completed("configmaps"))
	errsBefore := testutil.ToFloat64(metrics.FilterErrors.WithLabelValues("configmaps"))

	cms := kube.CoreV1().ConfigMaps(ns)
	// Filtered out by its label.
	if _, err := cms.Create(ctx, configMap(ns, "search", map[string]string{"v": "1"}, map[string]string{"team": "search"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No labels: the filter fails at runtime, and the event is kept.
	if _, err := cms.Create(ctx, configMap(ns, "bare", map[string]string{"v": "1"}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Server-side apply with a custom field manager.
	labels := map[string]string{"team": "payments"}
	apply := func(manager string, data map[string]string, annotations map[string]string) {
		t.Helper()
		ac := corev1ac.ConfigMap("cm", ns).WithLabels(labels).WithData(data).WithAnnotations(annotations)
		if _, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: manager, Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	apply("my-applier", map[string]string{"v": "1"}, nil)
	// The same manifest from another manager: only managedFields change,
	// so the update is a no-op once they are stripped.
	apply("other-applier", map[string]string{"v": "1"}, nil)
	// A heartbeat annotation: ignored.
	cm, err := cms.Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{"heartbeat": "1"}
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "heartbeater"}); err != nil {
		t.Fatal(err)
	}
	// A real change by a controller-style client.
	cm.Data["v"] = "2"
	cm.Annotations["heartbeat"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "my-controller"}); err != nil {
		t.Fatal(err)
	}
	// A marker object created last: once it is out, everything before it
	// for this namespace has been processed.
	if _, err := cms.Create(ctx, configMap(ns, "marker", nil, labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evs := k.WaitFor(t, "the marker", has("configmaps/"+ns+"/marker", "added"))

	keys := byKey(evs)
	if n := len(keys["configmaps/"+ns+"/search"]); n != 0 {
		t.Errorf("the filtered ConfigMap has %d events", n)
	}
	if n := len(keys["configmaps/"+ns+"/bare"]); n != 1 {
		t.Errorf("the ConfigMap the filter failed on has %d events, want 1 (kept)", n)
	}
	if got := testutil.ToFloat64(metrics.FilterErrors.WithLabelValues("configmaps")) - errsBefore; got < 1 {
		t.Errorf("filter errors counted: %v", got)
	}
	k.WaitLog(t, "filter failed at runtime")

	got := keys["configmaps/"+ns+"/cm"]
	var types []string
	for _, ev := range got {
		types = append(types, strings.TrimPrefix(ev.Type(), encoding.TypePrefix+"object."))
	}
	if strings.Join(types, ",") != "added,updated" {
		for _, ev := range got {
			t.Logf("%s %s %s", ev.Type(), ext(ev, encoding.ExtChangedBy), ev.Data())
		}
		t.Fatalf("cm events %v, want added,updated (the no-op apply and the heartbeat suppressed)", types)
	}
	for i, want := range []struct{ by, op string }{{"my-applier", "Apply"}, {"my-controller", "Update"}} {
		if by, op := ext(got[i], encoding.ExtChangedBy), ext(got[i], encoding.ExtChangeOp); by != want.by || op != want.op {
			t.Errorf("cm event %d: changedby %q changeop %q, want %q %q", i, by, op, want.by, want.op)
		}
		if ext(got[i], encoding.ExtChangeTime) == "" {
			t.Errorf("cm event %d has no changetime", i)
		}
		if strings.Contains(string(got[i].Data()), "@kubewire") || strings.Contains(string(got[i].Data()), "managedFields") {
			t.Errorf("cm event %d data leaks private or managed fields: %s", i, got[i].Data())
		}
	}
	if data, _ := dataOf(t, got[1])["data"].(map[string]any); data["v"] != "2" {
		t.Errorf("the update carries %v", data)
	}
	if n := testutil.ToFloat64(metrics.UpdatesSuppressed.WithLabelValues("configmaps", "ignored_paths")); n < 1 {
		t.Errorf("ignored_paths suppressions counted: %v", n)
	}
	if n := testutil.ToFloat64(metrics.UpdatesSuppressed.WithLabelValues("configmaps", "unchanged")); n < 1 {
		t.Errorf("unchanged suppressions counted: %v", n)
	}
}
