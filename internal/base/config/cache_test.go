package config

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCacheModesAreValidatedPerResource(t *testing.T) {
	cases := []struct {
		name, resource, wantErr string
	}{
		{"the default is accepted", `{version: v1, resource: configmaps, sinks: [out]}`, ""},
		{"raw is accepted for a resource without redaction", `{version: v1, resource: configmaps, cache: raw, filter: "true", ignorePaths: ["data"], sinks: [out]}`, ""},
		{"an unknown mode is refused", `{version: v1, resource: configmaps, cache: bytes, sinks: [out]}`, `resources[0].cache: Unsupported value: "bytes"`},
		{"raw with redact is accepted", `{version: v1, resource: configmaps, cache: raw, redact: [{path: "data['a']"}], sinks: [out]}`, ""},
		{"raw for Secrets is accepted with their built-in redaction", `{version: v1, resource: secrets, cache: raw, sinks: [out]}`, ""},
		{"raw for Secrets is accepted with allowSecretData", `{version: v1, resource: secrets, cache: raw, allowSecretData: true, sinks: [out]}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte("apiVersion: kubewire.io/v1alpha1\nkind: Config\ncluster: c\nsinks: [{name: out, type: stdout}]\nresources:\n  - "+c.resource+"\n"), testTypes{})
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var fe *field.Error
			if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}
