package packaging_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// testPod returns the one `helm test` hook of r.
func testPod(t *testing.T, r *packaging.Rendered) *unstructured.Unstructured {
	t.Helper()
	if len(r.Hooks) != 1 {
		t.Fatalf("want one hook, got %d", len(r.Hooks))
	}
	p := r.Hooks[0].Object
	if p.GetKind() != "Pod" || p.GetAnnotations()["helm.sh/hook"] != "test" {
		t.Fatalf("the hook is a %s annotated %v, want a Pod with helm.sh/hook: test", p.GetKind(), p.GetAnnotations())
	}
	return p
}

func TestHelmTestAsksTheMetricsServiceForReadyzUnderTheRestrictedPolicy(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{"the defaults", ``},
		{"another service port, a full name override and a NetworkPolicy", `
fullnameOverride: events
metrics: {service: {port: 8443}}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, "kw", "platform", tc.values)
			pod := testPod(t, r)
			svcs := r.Objects("Service")
			if len(svcs) != 1 {
				t.Fatalf("want one Service, got %d", len(svcs))
			}
			svc := svcs[0]
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			port := ports[0].(map[string]any)["port"]
			wantURL := fmt.Sprintf("http://%s.%s.svc:%v/readyz", svc.GetName(), svc.GetNamespace(), port)

			cs, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
			if len(cs) != 1 {
				t.Fatalf("want one container, got %d", len(cs))
			}
			c := cs[0].(map[string]any)
			cmd, _, _ := unstructured.NestedStringSlice(c, "command")
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			if !slices.Equal(cmd, []string{"curl"}) || !slices.Contains(args, "--fail") || args[len(args)-1] != wantURL {
				t.Errorf("the test runs %v %v; want curl --fail ... %s, which fails on anything but a 2xx", cmd, args, wantURL)
			}
			if image, _ := c["image"].(string); !strings.Contains(image, "@sha256:") {
				t.Errorf("the test image %q is not pinned by digest", image)
			}
			if policy, _, _ := unstructured.NestedString(pod.Object, "spec", "restartPolicy"); policy != "Never" {
				t.Errorf("restartPolicy %q: a failed check must fail the test, not restart", policy)
			}
			for path, want := range map[string]any{
				"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
				"capabilities.drop": []any{"ALL"}, "seccompProfile.type": "RuntimeDefault",
			} {
				got, _, _ := unstructured.NestedFieldNoCopy(c, append([]string{"securityContext"}, strings.Split(path, ".")...)...)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("test container securityContext.%s = %v, want %v", path, got, want)
				}
			}

			// kubewire's Service, PodDisruptionBudget and NetworkPolicy must
			// not select the test Pod as one of kubewire's pods.
			selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
			labels := pod.GetLabels()
			selected := true
			for k, v := range selector {
				selected = selected && labels[k] == v
			}
			if selected {
				t.Errorf("the metrics Service's selector %v picks the test Pod (labels %v)", selector, labels)
			}
			for _, np := range r.Objects("NetworkPolicy") {
				if !strings.Contains(fmt.Sprint(np.Object), labels["app.kubernetes.io/name"]) {
					t.Errorf("the NetworkPolicy's metricsFrom keeps the test Pod (%v) out of the metrics port", labels)
				}
			}
		})
	}
}

func TestHelmTestIsLeftOutWhenOffOrWithoutAService(t *testing.T) {
	for _, y := range []string{`tests: {enabled: false}`, `metrics: {service: {enabled: false}}`} {
		if r := render(t, "kw", "platform", y); len(r.Hooks) > 0 {
			t.Errorf("with %s a hook %s rendered", y, r.Hooks[0].Object.GetName())
		}
	}
}

func TestThePlainManifestsLeaveTheHelmTestOut(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, packaging.DeployPath))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "helm.sh/hook") {
		t.Errorf("%s holds a Helm hook, which kubectl apply would create as an ordinary object", packaging.DeployPath)
	}
}
