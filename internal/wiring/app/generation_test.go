package app_test

import (
	"context"
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

// A Deployment-like custom resource with a status subresource: status
// writes do not bump metadata.generation, spec writes do.
func TestGenerationChangedEmitsSpecEditsAndDeletesButNotStatusWrites(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	group := unique("gen") + ".example.com"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "rollouts." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "rollouts", Singular: "rollout", Kind: "Rollout", ListKind: "RolloutList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr(true),
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "rollouts"}
	ri := dyn.Resource(gvr).Namespace(ns)
	waitServed(t, gvr)
	k := start(t, cfgHeader+fmt.Sprintf("  - {group: %s, version: v1, resource: rollouts, updates: generationChanged, sinks: [out]}\n", group), testcluster.AdminUser)
	k.WaitFor(t, "the initial snapshot", completed("rollouts."+group))

	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(1)}}}
	u.SetAPIVersion(group + "/v1")
	u.SetKind("Rollout")
	u.SetName("web")
	u, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // status heartbeats: no new generation
		_ = unstructured.SetNestedField(u.Object, int64(i), "status", "observedReplicas")
		if u, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
	if u, err = ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u.GetGeneration() != 2 {
		t.Fatalf("the spec edit made generation %d, want 2", u.GetGeneration())
	}
	if err := ri.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	key := "rollouts." + group + "/" + ns + "/web"
	evs := k.WaitFor(t, "the delete", func(evs []event.Event) bool {
		got := byKey(evs)[key]
		return len(got) > 0 && got[len(got)-1].Type() == encoding.TypeDeleted
	})
	var types []string
	for _, ev := range byKey(evs)[key] {
		types = append(types, ev.Type())
	}
	want := []string{encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeDeleted}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v (status writes suppressed, the spec edit emitted)", types, want)
	}
}
