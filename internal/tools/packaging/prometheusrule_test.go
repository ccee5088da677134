package packaging_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// exportedMetrics describes every collector in kubewire's metrics registry
// and returns the names of its kubewire_ metrics, split into current and
// deprecated (those whose help starts with "Deprecated:"). Describe, unlike
// Gather, also sees a vector none of whose label values has been used.
func exportedMetrics(t *testing.T) (current, deprecated map[string]bool) {
	t.Helper()
	desc := regexp.MustCompile(`fqName: "([^"]+)", help: "([^"]*)"`)
	current, deprecated = map[string]bool{}, map[string]bool{}
	app.DefaultRegistry() // as kubewire does at startup: registers each sink type's collectors
	ch := make(chan *prometheus.Desc)
	go func() { metrics.Registry.Describe(ch); close(ch) }()
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read a metric name and help from %s", d)
		}
		if !strings.HasPrefix(m[1], "kubewire_") {
			continue
		}
		if strings.HasPrefix(m[2], "Deprecated:") {
			deprecated[m[1]] = true
		} else {
			current[m[1]] = true
		}
	}
	if !current["kubewire_events_observed_total"] || !current["kubewire_snapshot_records"] {
		t.Fatalf("describing kubewire's registry found %v, not even kubewire_events_observed_total and kubewire_snapshot_records", current)
	}
	return current, deprecated
}

// alertRules renders y and returns the PrometheusRule's rules.
func alertRules(t *testing.T, y string) []map[string]any {
	t.Helper()
	r := render(t, "kw", "platform", y)
	prs := r.Objects("PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(prs))
	}
	groups, _, _ := unstructured.NestedSlice(prs[0].Object, "spec", "groups")
	var out []map[string]any
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			out = append(out, r.(map[string]any))
		}
	}
	if len(out) == 0 {
		t.Fatal("the PrometheusRule has no rules")
	}
	return out
}

// metricNames returns the metric names a PromQL expression reads, with a
// histogram's _bucket, _sum and _count suffixes taken off.
func metricNames(expr string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`kubewire_[a-z0-9_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			m = strings.TrimSuffix(m, suffix)
		}
		names = append(names, m)
	}
	return names
}

// documentedAlerts is the first column of the table in the "## Alerts"
// section of docs/operations.md.
func documentedAlerts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Alerts\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no "## Alerts" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(Kubewire[A-Za-z]+)` \\|").FindAllStringSubmatch(section, -1) {
		names = append(names, m[1])
	}
	return names
}

func TestThePrometheusRuleIsOffByDefault(t *testing.T) {
	if prs := render(t, "kw", "platform", ``).Objects("PrometheusRule"); len(prs) > 0 {
		t.Errorf("a PrometheusRule rendered with the defaults; it needs the operator's CRD and must be asked for")
	}
}

func TestEveryAlertReadsOnlyMetricsKubewireExportsForItsOwnRelease(t *testing.T) {
	current, deprecated := exportedMetrics(t)
	rules := alertRules(t, `
prometheusRule:
  enabled: true
  staleAfter: {deployments.apps: 6h}
`)
	selector := `job="kw-kubewire-metrics",namespace="platform"`
	var names []string
	for _, r := range rules {
		name, _ := r["alert"].(string)
		expr, _ := r["expr"].(string)
		names = append(names, name)
		used := metricNames(expr)
		if len(used) == 0 {
			t.Errorf("alert %s reads no kubewire metric: %s", name, expr)
		}
		for _, m := range used {
			switch {
			case deprecated[m]:
				t.Errorf("alert %s reads %s, a deprecated name kubewire drops in the next release", name, m)
			case !current[m]:
				t.Errorf("alert %s reads %s, which kubewire does not export", name, m)
			}
		}
		// Every series the expression selects is this release's.
		if n := strings.Count(expr, "kubewire_"); strings.Count(expr, "{"+selector) != n {
			t.Errorf("alert %s does not select all of its %d series with {%s}: %s", name, n, selector, expr)
		}
		if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
			t.Errorf("alert %s has unbalanced brackets: %s", name, expr)
		}
		labels, _, _ := unstructured.NestedStringMap(r, "labels")
		if s := labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s has severity %q, want critical or warning", name, s)
		}
		ann, _, _ := unstructured.NestedStringMap(r, "annotations")
		if ann["summary"] == "" || ann["description"] == "" {
			t.Errorf("alert %s lacks a summary or description: %v", name, ann)
		}
	}
	if !slices.Contains(names, "KubewireResourceStale") {
		t.Error("staleAfter rendered no KubewireResourceStale alert")
	}
	// The doc and the rule list the same alerts.
	documented := documentedAlerts(t)
	for _, n := range names {
		if !slices.Contains(documented, n) {
			t.Errorf("alert %s is not in the table of docs/operations.md's Alerts section", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(names, n) {
			t.Errorf("docs/operations.md documents alert %s, which the PrometheusRule does not have", n)
		}
	}
}

func TestThePrometheusRuleTakesItsSelectorLabelsAndDisabledAlertsFromValues(t *testing.T) {
	rules := alertRules(t, `
prometheusRule:
  enabled: true
  selector: 'cluster="eu-1",job="kubewire"'
  alertLabels: {team: platform, severity: page}
  disabledAlerts: [KubewireKafkaProduceSlow, KubewireEventLagHigh]
`)
	for _, r := range rules {
		name := r["alert"].(string)
		if name == "KubewireKafkaProduceSlow" || name == "KubewireEventLagHigh" {
			t.Errorf("disabled alert %s rendered", name)
		}
		expr := r["expr"].(string)
		if strings.Count(expr, `{cluster="eu-1",job="kubewire"`) != strings.Count(expr, "kubewire_") {
			t.Errorf("alert %s does not use the given selector: %s", name, expr)
		}
		labels, _, _ := unstructured.NestedStringMap(r, "labels")
		if labels["team"] != "platform" || labels["severity"] != "page" {
			t.Errorf("alert %s labels %v, want alertLabels added and replacing its own", name, labels)
		}
	}
}

func TestPrometheusRuleValuesThatNameNothingFailAtInstall(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"a disabled alert that does not exist", `prometheusRule: {enabled: true, disabledAlerts: [KubewireSinkDown]}`,
			[]string{`prometheusRule.disabledAlerts[0] "KubewireSinkDown"`, "no such alert", "KubewireSinkUnhealthy"}},
		{"a stale resource that is not watched", `prometheusRule: {enabled: true, staleAfter: {pods: 1h}}`,
			[]string{"prometheusRule.staleAfter.pods", "not a resource in config.resources", "deployments.apps"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := renderErr(t, tc.values)
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error does not say %q:\n%v", part, err)
				}
			}
		})
	}
}

func TestThePrometheusRuleIsAdmittedByARealAPIServer(t *testing.T) {
	a := newApplier(t)
	installPrometheusRuleCRD(t, a)
	rel := unique("rel")
	createNamespace(t, rel)
	r := render(t, "kw", rel, `
prometheusRule:
  enabled: true
  staleAfter: {deployments.apps: 90m}
`)
	for _, pr := range r.Objects("PrometheusRule") {
		if err := a.create(context.Background(), pr, true); err != nil {
			t.Errorf("PrometheusRule %s is refused: %v", pr.GetName(), err)
		}
	}
}

func TestTheCheckpointAlertsSeeAGapCountedAtStartAndAStaleCheckpointOnTheLeader(t *testing.T) {
	rules := map[string]map[string]any{}
	for _, r := range alertRules(t, `prometheusRule: {enabled: true}`) {
		rules[r["alert"].(string)] = r
	}
	sel := `{job="kw-kubewire-metrics",namespace="platform"}`
	lost, stale := rules["KubewireVersionsLost"], rules["KubewireCheckpointStale"]
	if lost == nil || stale == nil {
		t.Fatalf("want alerts KubewireVersionsLost and KubewireCheckpointStale, got %v", slices.Sorted(maps.Keys(rules)))
	}
	// A gap is counted once, mostly at a start, in a series born at 1,
	// which increase() alone never sees.
	expr := lost["expr"].(string)
	for _, part := range []string{"increase(kubewire_gaps_total" + sel, "kubewire_gaps_total" + sel + " unless kubewire_gaps_total" + sel + " offset"} {
		if !strings.Contains(expr, part) {
			t.Errorf("KubewireVersionsLost does not have %q: %s", part, expr)
		}
	}
	if _, ok := lost["for"]; ok {
		t.Errorf("KubewireVersionsLost waits %v; a gap is counted once and must fire at once", lost["for"])
	}
	expr = stale["expr"].(string)
	for _, part := range []string{"kubewire_checkpoint_age_seconds" + sel + " > 600", "kubewire_is_leader" + sel + " == 1"} {
		if !strings.Contains(expr, part) {
			t.Errorf("KubewireCheckpointStale does not have %q: %s", part, expr)
		}
	}
	if stale["for"] != "10m" {
		t.Errorf("KubewireCheckpointStale for %v, want 10m", stale["for"])
	}
}
