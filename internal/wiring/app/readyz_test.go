package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// readyz answers /readyz through the handler and decodes a 503's body.
func readyz(t *testing.T, url string) (int, app.Readiness, string) {
	t.Helper()
	code, body := get(t, url)
	var r app.Readiness
	if code == http.StatusServiceUnavailable {
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz 503 body is not JSON: %v\n%s", err, body)
		}
	}
	return code, r, body
}

func TestReadyzNamesEachResourceNotSyncedWithWhyAndEachUnhealthySink(t *testing.T) {
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
	group := unique("why") + ".example.com"
	// Port 1 on loopback refuses connections: the NATS sink never connects.
	k := start(t, fmt.Sprintf(`apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: test
sinks:
  - name: out
    type: stdout
  - name: down
    type: nats
    nats: {servers: ["nats://127.0.0.1:1"]}
resources:
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
  - {version: v1, resource: secrets, namespaces: [%s], sinks: [out]}
  - {group: %s, version: v1, resource: widgets, sinks: [down]}
`, ns, ns, group), limitedUser)
	srv := httptest.NewServer(app.ReadyzHandler(k.App.Readiness))
	defer srv.Close()

	want := app.Readiness{
		Resources: []app.ResourceReadiness{
			{Resource: "secrets", State: informer.StateForbidden},
			{Resource: "widgets." + group, State: informer.StateNotServed},
		},
		Sinks: []app.SinkReadiness{{Sink: "down", State: dispatch.HealthConnecting}},
	}
	var body string
	testkit.Eventually(t, "/readyz to name each reason", func() bool {
		var code int
		var got app.Readiness
		code, got, body = readyz(t, srv.URL)
		return code == http.StatusServiceUnavailable && reflect.DeepEqual(got, want)
	})
	t.Logf("/readyz body: %s", body)
}

func TestAnOptionalResourceThatIsNotServedDoesNotHoldReadinessAndStreamsOnceServed(t *testing.T) {
	ns := namespace(t)
	group := unique("optional") + ".example.com"
	name := "widgets." + group
	k := start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
  - {group: %s, version: v1, resource: widgets, namespaces: [%s], optional: true, sinks: [out]}
`, ns, group, ns), testcluster.AdminUser)
	srv := httptest.NewServer(app.ReadyzHandler(k.App.Readiness))
	defer srv.Close()

	testkit.Eventually(t, "/readyz to answer 200 while the optional CRD is missing", func() bool {
		code, _ := get(t, srv.URL)
		return code == http.StatusOK
	})
	if r := k.App.Readiness(); !reflect.DeepEqual(r.OptionalNotServed, []string{name}) {
		t.Errorf("Readiness().OptionalNotServed = %v, want [%s]", r.OptionalNotServed, name)
	}
	k.WaitLog(t, "optional resource is not served", "resource="+name)
	if testutil.ToFloat64(metrics.InformerErrors.WithLabelValues(name, "not_found")) == 0 {
		t.Errorf("kubewire_informer_errors_total{resource=%s,reason=not_found} did not move", name)
	}

	gvr := installCRD(t, group)
	testkit.Eventually(t, "the optional resource to sync once served", func() bool {
		r := k.App.Readiness()
		return r.Ready && len(r.OptionalNotServed) == 0
	})
	w := widget(ns, "late", 1)
	w.SetAPIVersion(group + "/v1")
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.WaitFor(t, "the widget to stream", has(name+"/"+ns+"/late", "added"))
}
