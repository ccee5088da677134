package app_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/base/config"
)

// grantRead lets user get, list and watch resource in ns, and nothing else.
func grantRead(t *testing.T, ns, resource, user string) {
	t.Helper()
	ctx := context.Background()
	name := "read-" + resource
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// objectOps creates, updates and deletes one object named "obj" of
// resource in ns, and returns what the informer saw at each step.
func objectOps(t *testing.T, resource, ns string) []want {
	t.Helper()
	ctx := context.Background()
	var obj runtime.Object
	switch resource {
	case "secrets":
		obj = &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "obj"}, StringData: map[string]string{"v": "1"}}
	default:
		obj = configMap(ns, "obj", map[string]string{"v": "1"}, nil)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(corev1.SchemeGroupVersion.WithResource(resource)).Namespace(ns)
	o1, err := ri.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(o1.Object, "2", "metadata", "labels", "v")
	o2, err := ri.Update(ctx, o1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(ctx, "obj", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return []want{{"added", o1}, {"updated", o2}, {"deleted", o2}}
}

func TestSeveralNamespacesWatchedOneByOneStreamWithARoleInEachAndNoClusterWideGrant(t *testing.T) {
	for _, tc := range []struct {
		name, resource, extra string
	}{
		{"Secrets are watched per namespace by default.", "secrets", ""},
		{"ConfigMaps are watched per namespace with watchPerNamespace.", "configmaps", "watchPerNamespace: true, "},
	} {
		for _, cache := range []string{config.CacheRaw, config.CacheUnstructured} {
			t.Run(tc.name+" cache "+cache, func(t *testing.T) {
				nsA, nsB, nsOther := namespace(t), namespace(t), namespace(t)
				// The limited user may read the resource in nsA and nsB
				// only: a cluster-wide LIST would be refused.
				grantRead(t, nsA, tc.resource, limitedUser)
				grantRead(t, nsB, tc.resource, limitedUser)
				k := start(t, cfgHeader+fmt.Sprintf("  - {version: v1, resource: %s, namespaces: [%s, %s], %scache: %s, sinks: [out]}\n",
					tc.resource, nsA, nsB, tc.extra, cache), limitedUser)
				k.WaitFor(t, "the initial snapshot", completed(tc.resource))

				wants := map[string][]want{}
				for _, ns := range []string{nsA, nsB, nsOther} {
					wants[ns] = objectOps(t, tc.resource, ns)
				}
				keyOf := func(ns string) string { return tc.resource + "/" + ns + "/obj" }
				evs := k.WaitFor(t, "both namespaces' deletes", func(evs []event.Event) bool {
					m := byKey(evs)
					return len(m[keyOf(nsA)]) >= 3 && len(m[keyOf(nsB)]) >= 3
				})
				m := byKey(evs)
				for _, ns := range []string{nsA, nsB} {
					checkSequence(t, m[keyOf(ns)], "/clusters/test/api/v1/"+tc.resource, keyOf(ns), wants[ns])
				}
				if got := m[keyOf(nsOther)]; len(got) != 0 {
					t.Errorf("a namespace that is not configured streamed %d events", len(got))
				}
			})
		}
	}
}
