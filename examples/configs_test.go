package examples_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// yamlExamples lists every YAML file under examples/.
func yamlExamples(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// firstComment is the first comment line of a YAML file.
func firstComment(raw []byte) string {
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			return l
		}
	}
	return ""
}

func validate(path string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = cli.Main([]string{"validate", "--config", path}, &o, &e)
	return code, o.String(), e.String()
}

// Every YAML file under examples/ says in its first comment line what it
// is; each kubewire config passes `kubewire validate` with no warning, and
// each Helm values file is recognised as such by validate, while the config
// under its config: passes validate. (internal/tools/packaging renders the values
// files with the chart, against its schema.)
func TestEveryExampleYAMLSaysWhatItIsAndValidates(t *testing.T) {
	files := yamlExamples(t)
	var configs []string
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first := firstComment(raw)
			switch {
			case strings.HasPrefix(first, "# kubewire config"):
				configs = append(configs, filepath.Base(f))
				code, out, errOut := validate(f)
				if code != cli.ExitOK || strings.Contains(out, "warning") {
					t.Errorf("kubewire validate: exit %d\n%s%s", code, out, errOut)
				}
			case strings.HasPrefix(first, "# Helm values"):
				code, _, errOut := validate(f)
				if code != cli.ExitConfig || !strings.Contains(errOut, "this looks like Helm values; the kubewire config is under `config:`") {
					t.Errorf("kubewire validate on Helm values: exit %d, stderr %q; want 2 and that it looks like Helm values", code, errOut)
				}
				var vals struct {
					Config map[string]any `json:"config"`
				}
				if err := yaml.Unmarshal(raw, &vals); err != nil || vals.Config == nil {
					t.Fatalf("no config: block: %v", err)
				}
				inner, err := yaml.Marshal(vals.Config)
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(p, inner, 0o600); err != nil {
					t.Fatal(err)
				}
				if code, out, errOut := validate(p); code != cli.ExitOK || strings.Contains(out, "warning") {
					t.Errorf("the config under config: does not validate: exit %d\n%s%s", code, out, errOut)
				}
			default:
				t.Errorf("first comment line %q starts with neither \"# kubewire config\" nor \"# Helm values\"", first)
			}
		})
	}
	for _, want := range []string{"kafka-audit-sasl-tls.yaml", "jetstream-automation.yaml", "http-knative-broker.yaml", "secrets-namespaces.yaml"} {
		found := false
		for _, c := range configs {
			found = found || c == want
		}
		if !found {
			t.Errorf("no kubewire config %s under examples/", want)
		}
	}
}
