package config_test

import (
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// nsConfig is a config with one resource whose lines are given.
func nsConfig(resource string) string {
	return `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
` + resource + `    sinks: [out]
sinks:
  - name: out
    type: stdout
`
}

func TestEachNamespaceGetsItsOwnWatchWhereTheConfigOrSecretsAskForIt(t *testing.T) {
	for _, tc := range []struct {
		name, resource string
		perNamespace   bool
		warning        string
	}{
		{"Secrets in two namespaces are watched per namespace by default.",
			"    resource: secrets\n    namespaces: [a, b]\n", true, ""},
		{"Secrets in two namespaces with watchPerNamespace false use one cluster-wide watch, warned about.",
			"    resource: secrets\n    namespaces: [a, b]\n    watchPerNamespace: false\n", false, "watchPerNamespace: true"},
		{"Secrets in all namespaces are warned about.",
			"    resource: secrets\n", false, "every Secret in the cluster"},
		{"ConfigMaps in two namespaces use one cluster-wide watch by default, warned about.",
			"    resource: configmaps\n    namespaces: [a, b]\n", false, "ClusterRole"},
		{"ConfigMaps in two namespaces with watchPerNamespace true are watched per namespace.",
			"    resource: configmaps\n    namespaces: [a, b]\n    watchPerNamespace: true\n", true, ""},
		{"One namespace is always its own watch.",
			"    resource: configmaps\n    namespaces: [a]\n", true, ""},
		{"ConfigMaps in all namespaces are one watch, as configured, without a warning.",
			"    resource: configmaps\n", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(nsConfig(tc.resource)), app.DefaultRegistry())
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Resources[0].PerNamespaceWatch(); got != tc.perNamespace {
				t.Errorf("PerNamespaceWatch() = %v, want %v", got, tc.perNamespace)
			}
			ws := strings.Join(cfg.Warnings(), "\n")
			switch {
			case tc.warning == "" && ws != "":
				t.Errorf("warnings = %q, want none", ws)
			case tc.warning != "" && (!strings.Contains(ws, "resources[0]: ") || !strings.Contains(ws, tc.warning)):
				t.Errorf("warnings = %q, want resources[0] and %q", ws, tc.warning)
			}
		})
	}
}

func TestWatchPerNamespaceWithoutNamespacesIsRefusedWithItsPath(t *testing.T) {
	_, err := config.Parse([]byte(nsConfig("    resource: configmaps\n    watchPerNamespace: true\n")), app.DefaultRegistry())
	if err == nil {
		t.Fatal("accepted watchPerNamespace: true without namespaces")
	}
	if msg := err.Error(); !strings.Contains(msg, "resources[0].watchPerNamespace") || !strings.Contains(msg, "needs a namespaces list") {
		t.Errorf("error = %q, want the field path and what it needs", msg)
	}
}
