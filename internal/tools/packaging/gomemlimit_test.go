package packaging_test

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// envVars returns the container's environment variables called name.
func envVars(t *testing.T, c map[string]any, name string) []map[string]any {
	t.Helper()
	env, _, _ := unstructured.NestedSlice(c, "env")
	var out []map[string]any
	for _, e := range env {
		if e := e.(map[string]any); e["name"] == name {
			out = append(out, e)
		}
	}
	return out
}

func TestGOMEMLIMITIsNinetyPercentOfTheMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		// limit is the memory limit GOMEMLIMIT must be 90% of; empty means
		// GOMEMLIMIT must be absent.
		limit string
	}{
		{"the default 512Mi limit", ``, "512Mi"},
		{"a limit in GiB with a fraction", `resources: {limits: {memory: 1.5Gi}}`, "1.5Gi"},
		{"a limit in decimal gigabytes", `resources: {requests: {memory: 1G}, limits: {memory: 2G}}`, "2G"},
		{"a limit in plain bytes", `resources: {limits: {memory: 805306368}}`, "805306368"},
		{"a limit with an exponent", `resources: {limits: {memory: 3e9}}`, "3e9"},
		{"a limit in kibibytes", `resources: {limits: {memory: 786432Ki}}`, "786432Ki"},
		{"no memory limit leaves the Go runtime without a soft limit", `resources: {limits: null, requests: {memory: 128Mi}}`, ""},
		{"no resources at all", `resources: null`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, "kw", "platform", tc.values)
			c := container(t, deployment(t, r))
			vars := envVars(t, c, "GOMEMLIMIT")
			if tc.limit == "" {
				if len(vars) > 0 {
					t.Fatalf("GOMEMLIMIT is set without a memory limit: %v", vars)
				}
				return
			}
			if len(vars) != 1 {
				t.Fatalf("want one GOMEMLIMIT, got %v", vars)
			}
			// A plain number is bytes to the Go runtime.
			v, _ := vars[0]["value"].(string)
			got, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("GOMEMLIMIT %v is not a number of bytes: %v", vars[0], err)
			}
			q := resource.MustParse(tc.limit)
			limit := q.Value()
			if ratio := float64(got) / float64(limit); ratio < 0.89 || ratio > 0.91 {
				t.Errorf("GOMEMLIMIT %d is %.3f of the %s limit (%d bytes), want about 0.9", got, ratio, tc.limit, limit)
			}
			if got >= limit {
				t.Errorf("GOMEMLIMIT %d is not below the limit %d", got, limit)
			}
		})
	}
}

func TestAGOMEMLIMITGivenInEnvReplacesTheChartsOwn(t *testing.T) {
	r := render(t, "kw", "platform", `env: [{name: GOMEMLIMIT, value: 300MiB}]`)
	vars := envVars(t, container(t, deployment(t, r)), "GOMEMLIMIT")
	if len(vars) != 1 || vars[0]["value"] != "300MiB" {
		t.Errorf("want only the GOMEMLIMIT from env (300MiB), got %v", vars)
	}
}
