package app_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// One real etcd + kube-apiserver serves every test of the package; each test
// works in namespaces (and CRD groups) of its own.
var (
	cluster *testcluster.Cluster
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	crds    apiextensionsclient.Interface
	seq     atomic.Int64
)

const limitedUser = "limited"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr, Users: []testcluster.User{{Name: limitedUser}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		return 1
	}
	defer c.Stop()
	cluster = c
	rc := c.RESTConfig(testcluster.AdminUser)
	kube = kubernetes.NewForConfigOrDie(rc)
	dyn = dynamic.NewForConfigOrDie(rc)
	crds = apiextensionsclient.NewForConfigOrDie(rc)
	return m.Run()
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%10000, seq.Add(1))
}

func namespace(t *testing.T) string {
	t.Helper()
	name := unique("ns")
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

func start(t *testing.T, cfgYAML, user string) *apptest.Kubewire {
	t.Helper()
	return apptest.Start(t, cfgYAML, cluster.RESTConfig(user))
}

var (
	ext            = apptest.Ext
	byKey          = apptest.ByKey
	countCompleted = apptest.CountCompleted
)

// completed holds once a resource's snapshot.completed marker arrived.
func completed(resource string) func([]event.Event) bool {
	return func(evs []event.Event) bool { return countCompleted(evs, resource) > 0 }
}

// has holds once key has at least len(types) events.
func has(key string, types ...string) func([]event.Event) bool {
	return func(evs []event.Event) bool { return len(byKey(evs)[key]) >= len(types) }
}

// installCRD creates a namespaced CRD "widgets.<group>" and waits until it
// is established.
func installCRD(t *testing.T, group string) schema.GroupVersionResource {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: ptr(true),
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	waitServed(t, gvr)
	return gvr
}

// waitServed polls until the apiserver serves gvr (a CRD a moment after
// its creation).
func waitServed(t *testing.T, gvr schema.GroupVersionResource) {
	t.Helper()
	testkit.Eventually(t, gvr.String()+" to be served", func() bool {
		_, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
}

func ptr[T any](v T) *T { return &v }

func widget(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion("placeholder")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func configMap(ns, name string, data map[string]string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: data}
}
