package packaging_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// TestEveryExampleValuesFileFitsTheSchemaRendersAndLoads checks the values
// files docs/quickstart.md installs: each is valid against the chart's
// values.schema.json on its own, renders with the Helm SDK, and yields a
// config kubewire's strict loader accepts, with every file it names mounted.
func TestEveryExampleValuesFileFitsTheSchemaRendersAndLoads(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "helm", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d example values files in examples/helm, want at least the 4 docs/quickstart.md uses", len(files))
	}
	schema, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	quickstart, err := os.ReadFile(filepath.Join(repoRoot, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := packaging.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var vals map[string]any
			if err := yaml.UnmarshalStrict(raw, &vals); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// As helm install checks it: the file over the chart's defaults.
			merged, err := chartutil.CoalesceValues(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			if err := chartutil.ValidateAgainstSingleSchema(merged, schema); err != nil {
				t.Errorf("%s does not fit values.schema.json: %v", name, err)
			}
			r, err := packaging.Render(chartDir, packaging.Release{Name: "kubewire", Namespace: "kubewire", Values: vals})
			if err != nil {
				t.Fatalf("rendering with %s: %v", name, err)
			}
			checkConfigLoads(t, r)
			d := deployment(t, r)
			checkSecretMounts(t, r, d.Object, container(t, d))
			if !strings.Contains(string(quickstart), "examples/helm/"+name) {
				t.Errorf("docs/quickstart.md does not mention examples/helm/%s", name)
			}
		})
	}
}

// TestTheSecretsExampleGrantsNoClusterWideRead pins what the example
// promises in its comment: Roles in team-a and team-b, no ClusterRole.
func TestTheSecretsExampleGrantsNoClusterWideRead(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples", "helm", "secrets-two-namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, "kw", "kubewire", string(raw))
	checkRBAC(t, r, valuesSet{roleRules: map[string][]string{"team-a": {"/secrets"}, "team-b": {"/secrets"}}}, "kw", "kubewire")
}
