package packaging_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/tools/packaging"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/stdout"
)

func TestValuesThatBreakTheSchemaFailWithThePathAndWhatWasExpected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   []string // every part must appear in the error
	}{
		{"a misspelt top-level key is refused rather than ignored", `replicas: 2`,
			[]string{"additional properties 'replicas' not allowed"}},
		{"replicaCount must be a number", `replicaCount: two`,
			[]string{"/replicaCount", "want integer"}},
		{"the cluster name must be a DNS-1123 label", `config: {cluster: Prod_EU}`,
			[]string{"/config/cluster", "does not match pattern"}},
		{"a sink type kubewire does not have is named with the ones it has", `
config:
  sinks: [{name: out, type: kinesis}]`,
			[]string{"/config/sinks/0/type", "'stdout'", "'nats'", "'kafka'"}},
		{"a resource needs its sinks", `
config:
  resources: [{version: v1, resource: configmaps}]`,
			[]string{"/config/resources/0", "missing property 'sinks'"}},
		{"an empty resources list is refused", `config: {resources: []}`,
			[]string{"/config/resources", "minItems"}},
		{"a namespace must be a DNS-1123 label", `
config:
  resources: [{version: v1, resource: configmaps, namespaces: [Team-A], sinks: [out]}]`,
			[]string{"/config/resources/0/namespaces/0", "does not match pattern"}},
		{"a secret mount needs a mount path", `
secretMounts: [{name: kafka, secretName: kafka}]`,
			[]string{"/secretMounts/0", "missing property 'mountPath'"}},
		{"a secret may not be mounted over the config", `
secretMounts: [{name: kafka, secretName: kafka, mountPath: /etc/kubewire/kafka}]`,
			[]string{"secretMounts[0].mountPath", "/etc/kubewire/kafka", "/var/run/secrets/kubewire/kafka"}},
		{"two secret mounts may not share a volume name", `
secretMounts:
  - {name: tls, secretName: kafka-tls, mountPath: /var/run/secrets/kubewire/kafka}
  - {name: tls, secretName: nats-tls, mountPath: /var/run/secrets/kubewire/nats}`,
			[]string{"secretMounts[1].name", "already used"}},
		{"a lease duration must be a Go duration", `leaderElection: {leaseDuration: 15 seconds}`,
			[]string{"/leaderElection/leaseDuration"}},
		{"the log format is json or text", `logFormat: yaml`,
			[]string{"/logFormat", "'json'", "'text'"}},
		{"an overflow policy kubewire does not have is named with the ones it has", `
config:
  sinks: [{name: out, type: stdout, overflow: drop}]`,
			[]string{"/config/sinks/0/overflow", "'spool'", "'conflate'"}},
		{"a spool of no bytes is refused", `
config:
  sinks: [{name: out, type: stdout, spool: {maxBytes: 0}}]`,
			[]string{"/config/sinks/0/spool/maxBytes", "minimum"}},
		{"an fsync policy kubewire does not have is named with the ones it has", `
config:
  sinks: [{name: out, type: stdout, spool: {fsync: sometimes}}]`,
			[]string{"/config/sinks/0/spool/fsync", "'always'", "'interval'", "'never'"}},
		{"a misspelt spool field is refused rather than ignored", `
config:
  sinks: [{name: out, type: stdout, spool: {maxSize: 1024}}]`,
			[]string{"/config/sinks/0/spool", "additional properties 'maxSize' not allowed"}},
		{"a spool size must be a whole quantity", `spool: {sizeLimit: 1.5Gi}`,
			[]string{"/spool/sizeLimit", "does not match pattern"}},
		{"a kafka broker with a scheme is refused", `
config:
  sinks: [{name: out, type: kafka, kafka: {brokers: ["kafka://kafka:9092"]}}]`,
			[]string{"/config/sinks/0/kafka/brokers/0", "does not match pattern"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refusesToRender(t, tc.values, tc.want) })
	}
}

// TestTheChartPassesHelmLint runs what `helm lint --strict` runs (chart
// file, values, templates against the schema and deprecated APIs), through
// the SDK because no helm binary is installed on our machines.
func TestTheChartPassesHelmLint(t *testing.T) {
	for _, vs := range valuesSets("team-a", "team-b") {
		t.Run(vs.name, func(t *testing.T) {
			l := lint.All(chartDir, values(t, vs.values), "platform", false)
			for _, m := range l.Messages {
				// Strict: warnings fail too. INFO is advice such as "icon is
				// recommended", which a chart without a logo cannot follow.
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestTheSchemaKnowsEveryConfigField keeps values.schema.json in step with
// internal/base/config: the schema refuses unknown config fields (as kubewire
// does), so a field added to the config must be added to the schema, and a
// field the config dropped must leave it.
func TestTheSchemaKnowsEveryConfigField(t *testing.T) {
	var schema map[string]any
	readJSON(t, filepath.Join(chartDir, "values.schema.json"), &schema)
	props := func(path ...string) []string {
		node := schema
		for _, p := range path {
			node = node[p].(map[string]any)
		}
		keys := []string{}
		for k := range node["properties"].(map[string]any) {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys
	}
	cfg := []string{"properties", "config"}
	for _, tc := range []struct {
		what string
		typ  reflect.Type
		path []string
	}{
		{"config", reflect.TypeFor[config.Config](), cfg},
		{"config.client", reflect.TypeFor[config.ClientConfig](), append(slices.Clone(cfg), "properties", "client")},
		{"config.dispatch", reflect.TypeFor[config.DispatchConfig](), append(slices.Clone(cfg), "properties", "dispatch")},
		{"config.resources[]", reflect.TypeFor[config.Resource](), append(slices.Clone(cfg), "properties", "resources", "items")},
		// Each sink type's block sits beside the common fields (below).
		{"config.sinks[]", reflect.TypeFor[config.Sink](), append(slices.Clone(cfg), "properties", "sinks", "items")},
		{"config.sinks[].stdout", reflect.TypeFor[stdout.Config](), append(slices.Clone(cfg), "properties", "sinks", "items", "properties", "stdout")},
		{"config.sinks[].spool", reflect.TypeFor[config.SpoolConfig](), append(slices.Clone(cfg), "properties", "sinks", "items", "properties", "spool")},
		{"config.resources[].redact[]", reflect.TypeFor[config.RedactRule](), append(slices.Clone(cfg), "properties", "resources", "items", "properties", "redact", "items")},
	} {
		want := jsonFields(tc.typ)
		if tc.what == "config.sinks[]" {
			want = append(want, app.DefaultRegistry().Types()...)
			slices.Sort(want)
		}
		if got := props(tc.path...); !slices.Equal(got, want) {
			t.Errorf("values.schema.json %s has properties %v; internal/base/config has %v", tc.what, got, want)
		}
	}
	sinkTypes := schema["properties"].(map[string]any)["config"].(map[string]any)["properties"].(map[string]any)["sinks"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)["enum"]
	got := []string{}
	for _, s := range sinkTypes.([]any) {
		got = append(got, s.(string))
	}
	if want := app.DefaultRegistry().Types(); !slices.Equal(got, want) {
		t.Errorf("values.schema.json allows sink types %v; kubewire has %v", got, want)
	}
}

// TestTheChartSchemaHoldsEverySinkSpecsBlock keeps the sink types and
// blocks of values.schema.json equal to what the registered specs say, as
// `make manifests` writes them.
func TestTheChartSchemaHoldsEverySinkSpecsBlock(t *testing.T) {
	path := filepath.Join(chartDir, "values.schema.json")
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reg := app.DefaultRegistry()
	var specs []packaging.SinkBlockSchema
	for _, typ := range reg.Types() {
		specs = append(specs, packaging.SinkBlockSchema{Type: typ, Schema: reg[typ].Schema})
	}
	want, err := packaging.WithSinkSchemas(have, specs)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != string(want) {
		t.Errorf("%s is out of date with the sink specs; run make manifests", packaging.SchemaPath)
	}
	var schema map[string]any
	if err := json.Unmarshal(want, &schema); err != nil {
		t.Fatalf("the generated schema is not JSON: %v", err)
	}
}

// TestWithSinkSchemasReplacesTheBlocksAndKeepsTheRest checks the generator
// itself: a block of a type that is no longer registered goes, a new one
// comes after type, and bytes outside the sink properties stay as they were.
func TestWithSinkSchemasReplacesTheBlocksAndKeepsTheRest(t *testing.T) {
	in := `{
  "x": 1,
  "properties": {"config": {"properties": {"sinks": {"items": {"properties": {
    "name": {"type": "string"}, "type": {"enum": ["old"]}, "old": {"type": "object"}, "spool": {}
  }}}}}},
  "y":   [1, 2]
}
`
	out, err := packaging.WithSinkSchemas([]byte(in), []packaging.SinkBlockSchema{{Type: "a", Schema: `{"type":"object"}`}, {Type: "b", Schema: `{}`}})
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{`"type": {`, `"a"`, `"b": {}`, `"spool": {}`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old") {
		t.Errorf("the unregistered block survived:\n%s", got)
	}
	if !strings.HasPrefix(got, "{\n  \"x\": 1,\n") || !strings.HasSuffix(got, "\n  \"y\":   [1, 2]\n}\n") {
		t.Errorf("bytes outside the sink properties changed:\n%s", got)
	}
	if i, j := strings.Index(got, `"type": {`), strings.Index(got, `"a": {`); i < 0 || j < i {
		t.Errorf("the blocks do not follow type:\n%s", got)
	}
}

// jsonFields lists the JSON names of a struct's fields, sorted.
func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestTheChartReadmeDocumentsEveryValue checks the values table in
// charts/kubewire/README.md against values.yaml, both ways: every value is
// documented (itself or through a parent key), and every documented key
// exists.
func TestTheChartReadmeDocumentsEveryValue(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		t.Fatal(err)
	}
	var leaves []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			leaves = append(leaves, prefix)
			return
		}
		for k, x := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, x)
		}
	}
	walk("", vals)

	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		documented = append(documented, m[1])
	}
	if len(documented) == 0 {
		t.Fatal("README.md has no values table rows of the form | `key` |")
	}
	covers := func(doc, leaf string) bool { return leaf == doc || strings.HasPrefix(leaf, doc+".") }
	for _, leaf := range leaves {
		if !slices.ContainsFunc(documented, func(d string) bool { return covers(d, leaf) }) {
			t.Errorf("values.yaml has %s, which the README's values table does not document", leaf)
		}
	}
	for _, d := range documented {
		if !slices.ContainsFunc(leaves, func(leaf string) bool { return covers(d, leaf) }) {
			t.Errorf("the README documents %s, which values.yaml does not have", d)
		}
	}
}

// TestTheDashboardChartsKubewiresOwnMetrics checks files/dashboard.json:
// valid JSON, one templated Prometheus data source, every metric it queries
// declared by internal/base/metrics, and the signals operators need all there.
func TestTheDashboardChartsKubewiresOwnMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type       string         `json:"type"`
			Title      string         `json:"title"`
			Datasource map[string]any `json:"datasource"`
			Targets    []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	if dash.UID == "" {
		t.Error("the dashboard has no uid, so every import would make a new copy")
	}

	declared := declaredMetrics(t)
	metric := regexp.MustCompile(`kubewire_[a-z_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q does not use the ${datasource} variable: %v", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				used[m] = true
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !declared[m] && !declared[base] {
					t.Errorf("panel %q queries %s, which internal/base/metrics does not declare", p.Title, m)
				}
			}
		}
	}
	for _, m := range []string{
		"kubewire_events_published_total", "kubewire_buffer_events", "kubewire_events_failed_total",
		"kubewire_informer_errors_total", "kubewire_sink_write_retries_total", "kubewire_snapshot_records_total",
		"kubewire_sink_healthy",
	} {
		if !used[m] {
			t.Errorf("the dashboard has no panel for %s", m)
		}
	}

	r := render(t, "kw", "platform", `dashboard: {enabled: true}`)
	for _, cm := range r.Objects("ConfigMap") {
		if got, ok, _ := unstructured.NestedString(cm.Object, "data", "kubewire.json"); ok {
			if got != strings.TrimRight(string(raw), "\n") {
				t.Error("the dashboard ConfigMap does not hold files/dashboard.json as it is")
			}
			if cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("the dashboard ConfigMap lacks the grafana_dashboard label the sidecar looks for: %v", cm.GetLabels())
			}
			return
		}
	}
	t.Error("dashboard.enabled rendered no ConfigMap with kubewire.json")
}

// declaredMetrics reads the metric names internal/base/metrics declares. The
// source is read rather than the registry because a labelled vector appears
// in the registry only once it has a child, and failure counters usually
// have none.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "internal", "base", "metrics", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`Name:\s*"(kubewire_[a-z_]+)"`)
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("found no metric declarations in internal/base/metrics")
	}
	return out
}

// TestTheDeployManifestsMatchTheChart keeps deploy/kubewire.yaml, the plain
// manifests for people without Helm, identical to the chart's defaults.
func TestTheDeployManifestsMatchTheChart(t *testing.T) {
	want, err := packaging.DeployManifests(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repoRoot, packaging.DeployPath))
	if err != nil {
		t.Fatalf("%v (run make manifests)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is out of date with %s; run make manifests and commit the result.\nfirst difference at line %d",
			packaging.DeployPath, packaging.ChartPath, firstDiffLine(string(got), string(want)))
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
