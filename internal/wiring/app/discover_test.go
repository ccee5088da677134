package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// discoverConfig selects every resource of the groups under root, with a
// filter and a redaction that must hold for each.
func discoverConfig(root string) string {
	return fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: test
sinks:
  - {name: out, type: stdout}
resources:
  - discover:
      groups: ["*.%s"]
    filter: "object.metadata.name != 'hidden'"
    redact: [{path: spec.token}]
    snapshotInterval: 0
    sinks: [out]
`, root)
}

// events of one resource (by key prefix), in order.
func eventsOf(evs []event.Event, prefix string) []event.Event {
	var out []event.Event
	for _, ev := range evs {
		k := ext(ev, encoding.ExtPartitionKey)
		if k == prefix || strings.HasPrefix(k, prefix+"/") {
			out = append(out, ev)
		}
	}
	return out
}

func typesOf(evs []event.Event) []string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, strings.TrimPrefix(ev.Type(), encoding.TypePrefix))
	}
	return ts
}

func deleteCRD(t *testing.T, name string) {
	t.Helper()
	if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD %s: %v", name, err)
	}
	testkit.Eventually(t, "CRD "+name+" to be gone", func() bool {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{})
		return err != nil
	})
}

func createWidget(t *testing.T, gvr schema.GroupVersionResource, ns, name string, token string) {
	t.Helper()
	w := widget(ns, name, 1)
	w.SetAPIVersion(gvr.GroupVersion().String())
	_ = unstructured.SetNestedField(w.Object, token, "spec", "token")
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %s: %v", gvr.Resource, name, err)
	}
}

// TestADiscoverEntryFollowsCRDsAsTheyComeAndGoAndKeepsItsFiltersAndRedaction
// runs the discovery cases against one real apiserver, in one run
// of kubewire, to keep the CI budget.
func TestADiscoverEntryFollowsCRDsAsTheyComeAndGoAndKeepsItsFiltersAndRedaction(t *testing.T) {
	ctx := context.Background()
	root := unique("disc") + ".example.com"
	ns := namespace(t)
	a := installCRD(t, "a."+root)
	createWidget(t, a, ns, "w1", "s3cret")
	createWidget(t, a, ns, "hidden", "x")

	// An aggregated API whose Service does not exist: discovery of its
	// group fails, and the rest must stream anyway.
	broken := "broken." + root
	apisvc := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + broken},
		"spec": map[string]any{"group": broken, "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": "default", "name": "missing"}},
	}}
	if _, err := dyn.Resource(apisvc).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(apisvc).Delete(context.Background(), "v1."+broken, metav1.DeleteOptions{}) })

	k := start(t, discoverConfig(root), testcluster.AdminUser)
	prefixA := "widgets.a." + root

	t.Run("what discovery finds streams starting with its snapshot, filtered and redacted", func(t *testing.T) {
		evs := k.WaitFor(t, prefixA+" snapshot", completed(prefixA))
		got := eventsOf(evs, prefixA)
		if ts := typesOf(got); !slices.Equal(ts, []string{"snapshot.started", "object.synced", "snapshot.completed"}) {
			t.Fatalf("events of %s: %v; want the snapshot of w1 alone (hidden is filtered out)", prefixA, ts)
		}
		token, _, _ := unstructured.NestedString(asObject(t, got[1]), "spec", "token")
		if !strings.HasPrefix(token, "sha256:") {
			t.Errorf("spec.token = %q; the discover entry's redaction did not apply", token)
		}
	})

	t.Run("a group whose discovery fails is reported and holds nothing back", func(t *testing.T) {
		testkit.Eventually(t, "readiness to name "+broken, func() bool {
			r := k.App.Readiness()
			return r.Ready && slices.Contains(r.DiscoveryFailed, broken+"/v1")
		}, func() string { return fmt.Sprintf("%+v", k.App.Readiness()) })
	})

	t.Run("a CRD installed while objects churn streams within 30s, starting with its snapshot", func(t *testing.T) {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w := widget(ns, fmt.Sprintf("churn-%d", i), int64(i))
				w.SetAPIVersion(a.GroupVersion().String())
				_, _ = dyn.Resource(a).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
			}
		}()
		b := installCRD(t, "b."+root)
		createWidget(t, b, ns, "w2", "t")
		prefixB := "widgets.b." + root
		var evs []event.Event
		testkit.Within(t, 30*time.Second, prefixB+" to stream w2", func() bool {
			evs = eventsOf(k.Events(t), prefixB)
			return slices.ContainsFunc(evs, func(ev event.Event) bool { return ext(ev, encoding.ExtName) == "w2" })
		})
		close(stop)
		wg.Wait()
		if evs[0].Type() != encoding.TypeSnapshotStarted {
			t.Errorf("the first event of %s is %s; want snapshot.started", prefixB, evs[0].Type())
		}
	})

	t.Run("a CRD deleted with objects streams their deletes, then resource.removed, then nothing", func(t *testing.T) {
		before := eventsOf(k.Events(t), prefixA)
		live := map[string]bool{}
		for _, ev := range before {
			switch ev.Type() {
			case encoding.TypeSynced, encoding.TypeAdded, encoding.TypeUpdated:
				live[ext(ev, encoding.ExtName)] = true
			case encoding.TypeDeleted:
				delete(live, ext(ev, encoding.ExtName))
			}
		}
		deleteCRD(t, "widgets.a."+root)
		evs := k.WaitFor(t, prefixA+" resource.removed", func(evs []event.Event) bool {
			return slices.ContainsFunc(eventsOf(evs, prefixA), func(ev event.Event) bool { return ev.Type() == encoding.TypeRemoved })
		})
		after := eventsOf(evs, prefixA)[len(before):]
		last := after[len(after)-1]
		if last.Type() != encoding.TypeRemoved {
			t.Fatalf("events after resource.removed: %v", typesOf(after))
		}
		for _, ev := range after[:len(after)-1] {
			if ev.Type() == encoding.TypeDeleted {
				delete(live, ext(ev, encoding.ExtName))
			}
		}
		// A healthy watch sees every delete the finalizer makes, ahead of
		// resource.removed.
		if len(live) > 0 {
			t.Errorf("objects without a delete before resource.removed: %v", live)
		}
		if want := prefixA + "/removed/"; !strings.HasPrefix(last.ID(), want) || len(last.ID()) == len(want) {
			t.Errorf("resource.removed id %q; want %s<uid of the CRD>", last.ID(), want)
		}
	})

	t.Run("a CRD created again under the same name streams afresh, after the old one's removal", func(t *testing.T) {
		n := len(eventsOf(k.Events(t), prefixA))
		a2 := installCRD(t, "a."+root)
		createWidget(t, a2, ns, "w3", "t")
		evs := k.WaitFor(t, "w3", func(evs []event.Event) bool {
			return slices.ContainsFunc(eventsOf(evs, prefixA)[n:], func(ev event.Event) bool { return ext(ev, encoding.ExtName) == "w3" })
		})
		again := eventsOf(evs, prefixA)[n:]
		if again[0].Type() != encoding.TypeSnapshotStarted {
			t.Errorf("the re-created resource's first event is %s; want snapshot.started: %v", again[0].Type(), typesOf(again))
		}
	})
}

func asObject(t *testing.T, ev event.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := ev.DataAs(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestARestartDoesNotResumeACRDCreatedAgainUnderTheSameNameNorStreamItsOwnCheckpointLease
// restarts kubewire with a checkpoint across a delete and re-create of a
// CRD: the new resource must start with a snapshot, not resume.
func TestARestartDoesNotResumeACRDCreatedAgainUnderTheSameNameNorStreamItsOwnCheckpointLease(t *testing.T) {
	ctx := context.Background()
	root := unique("again") + ".example.com"
	ns := namespace(t)
	a := installCRD(t, "a."+root)
	createWidget(t, a, ns, "w1", "t")
	rc := cluster.RESTConfig(testcluster.AdminUser)
	store := func() *checkpoint.Store {
		s, err := checkpoint.New(rc, ns, "cp", slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prefix := "widgets.a." + root
	// Leases of the namespace are streamed too, by an explicit entry: the
	// checkpoint's own Lease, written every 100ms, must not be.
	cfg := discoverConfig(root) + fmt.Sprintf("  - {group: coordination.k8s.io, version: v1, resource: leases, namespaces: [%s], sinks: [out]}\n", ns)
	opts := func(o *app.Options) {
		o.Checkpoint, o.CheckpointInterval, o.OwnLeases = store(), 100*time.Millisecond, []string{"cp"}
	}
	k := apptest.StartWith(t, cfg, rc, opts)
	k.WaitFor(t, prefix+" snapshot", completed(prefix))
	testkit.Eventually(t, "the checkpoint to hold "+prefix, func() bool {
		e, err := store().Load(ctx)
		return err == nil && len(e[prefix].Streams) > 0 && e[prefix].UID != ""
	})
	k.Shutdown(t)

	deleteCRD(t, "widgets.a."+root)
	a = installCRD(t, "a."+root)
	createWidget(t, a, ns, "w2", "t")

	k2 := apptest.StartWith(t, cfg, rc, opts)
	evs := k2.WaitFor(t, "w2", has(prefix+"/"+ns+"/w2", "any"))
	for _, ev := range append(k.Events(t), evs...) {
		if ext(ev, encoding.ExtPartitionKey) == "leases.coordination.k8s.io/"+ns+"/cp" {
			t.Fatalf("kubewire streamed its own checkpoint Lease: %s %s", ev.Type(), ev.ID())
		}
	}
	got := eventsOf(evs, prefix)
	if ts := typesOf(got); len(ts) == 0 || ts[0] != "snapshot.started" || slices.Contains(ts, "watch.gap") {
		t.Errorf("events of the re-created resource: %v; want a fresh snapshot, no resume and no gap", ts)
	}
}

// setServed sets which versions of the CRD name are served.
func setServed(t *testing.T, name string, served map[string]bool) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, "the CRD's served versions to be updated", func() bool {
		crd, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Served = served[crd.Spec.Versions[i].Name]
		}
		_, err = crds.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
		return err == nil
	})
}

func TestADiscoveredResourceKeepsItsStreamAcrossAChangeOfPreferredVersionAndWhileUnavailable(t *testing.T) {
	ctx := context.Background()
	root := unique("ver") + ".example.com"
	group := "a." + root
	ns := namespace(t)
	name := "widgets." + group
	v := func(n string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: n, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}}}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group:    group,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope:    apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{v("v1", true), v("v2", false)},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	waitServed(t, v1.GroupResource().WithVersion("v2"))
	createWidget(t, v1, ns, "w1", "t")

	k := start(t, discoverConfig(root), testcluster.AdminUser)
	evs := k.WaitFor(t, "the snapshot", completed(name))
	if src := eventsOf(evs, name)[1].Source(); !strings.Contains(src, "/"+group+"/v2/") {
		t.Fatalf("source %s; want the preferred version v2", src)
	}
	key := name + "/" + ns + "/w1"
	update := func(size int64) {
		t.Helper()
		testkit.Eventually(t, "w1 to be updated", func() bool {
			u, err := dyn.Resource(v1).Namespace(ns).Get(ctx, "w1", metav1.GetOptions{})
			if err != nil {
				return false
			}
			_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
			_, err = dyn.Resource(v1).Namespace(ns).Update(ctx, u, metav1.UpdateOptions{})
			return err == nil
		})
	}
	updatedTo := func(size int64) func([]event.Event) bool {
		return func(evs []event.Event) bool {
			for _, ev := range byKey(evs)[key] {
				// A CRD update restarts the API server's watch cache of the
				// resource, which then refuses the old version: the stream
				// may go on through a declared gap and a snapshot.
				if ev.Type() == encoding.TypeUpdated || ev.Type() == encoding.TypeSynced {
					n, _, _ := unstructured.NestedFieldNoCopy(asObject(t, ev), "spec", "size")
					if f, ok := n.(float64); ok && int64(f) == size {
						return true
					}
				}
			}
			return false
		}
	}

	// v2 no longer served: v1 is preferred. Same key, same checkpoint
	// (no config-changed gap); only the version in source and apiVersion.
	setServed(t, name, map[string]bool{"v1": true})
	k.WaitLog(t, "preferred version changed", "to=v1")
	// The line comes before the v2 watch stops: an update made before the
	// v1 watcher runs may still go out at v2, rightly.
	k.WaitLog(t, "informer synced", "resource="+name, "version=v1")
	update(2)
	evs = k.WaitFor(t, "the update at v1", updatedTo(2))
	last := byKey(evs)[key][len(byKey(evs)[key])-1]
	if !strings.Contains(last.Source(), "/"+group+"/v1/") || ext(last, encoding.ExtAPIVersion) != group+"/v1" {
		t.Errorf("after the change: source %s, apiversion %s; want v1", last.Source(), ext(last, encoding.ExtAPIVersion))
	}

	// No version served: the CRD exists, so the resource is unavailable,
	// not removed; served again, it resumes where it was.
	setServed(t, name, map[string]bool{})
	testkit.Eventually(t, name+" to be unavailable", func() bool {
		return slices.Contains(k.App.Readiness().Unavailable, name)
	}, func() string { return fmt.Sprintf("%+v", k.App.Readiness()) })
	setServed(t, name, map[string]bool{"v1": true})
	waitServed(t, v1)
	testkit.Eventually(t, name+" to be back", func() bool {
		return !slices.Contains(k.App.Readiness().Unavailable, name)
	})
	update(3)
	evs = k.WaitFor(t, "the update after the return", updatedTo(3))
	if ts := typesOf(eventsOf(evs, name)); slices.Contains(ts, "resource.removed") || slices.Contains(ts, "object.deleted") {
		t.Errorf("events of %s: %v; a version change or an unavailable resource is no delete", name, ts)
	}
	for _, ev := range eventsOf(evs, name) {
		var g encoding.Gap
		if ev.Type() == encoding.TypeGap && ev.DataAs(&g) == nil && g.Reason == "config-changed" {
			t.Errorf("a config-changed gap: the version counted in the config hash")
		}
		if k := ext(ev, encoding.ExtPartitionKey); k != name && k != key {
			t.Errorf("key %q; keys hold no version", k)
		}
	}
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

func TestADiscoveredResourceThatIsNotPermittedHoldsBackNeitherTheOthersNorReadiness(t *testing.T) {
	ctx := context.Background()
	root := unique("perm") + ".example.com"
	ns := namespace(t)
	a, b := installCRD(t, "a."+root), installCRD(t, "b."+root)
	createWidget(t, a, ns, "w1", "t")
	createWidget(t, b, ns, "w1", "t")
	// The limited user may read widgets of group a (and the CRDs), not b.
	name := unique("read-a")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{a.Group}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: limitedUser}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	k := start(t, discoverConfig(root), limitedUser)
	k.WaitFor(t, "the permitted resource's snapshot", completed("widgets."+a.Group))
	testkit.Eventually(t, "readiness, naming the resource not permitted", func() bool {
		r := k.App.Readiness()
		return r.Ready && slices.Equal(r.DiscoveredForbidden, []string{"widgets." + b.Group})
	}, func() string { return fmt.Sprintf("%+v", k.App.Readiness()) })
}
