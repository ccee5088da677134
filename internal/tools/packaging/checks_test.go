package packaging_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/tools/packaging"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// renderErr renders y and returns the error, failing the test when there is
// none.
func renderErr(t *testing.T, y string) error {
	t.Helper()
	_, err := packaging.Render(chartDir, packaging.Release{Name: "kw", Namespace: "platform", Values: values(t, y)})
	if err == nil {
		t.Fatal("rendered without error")
	}
	return err
}

// oneResource is a config with one configmaps resource whose entry carries
// the extra flow-mapping fields given (", labelSelector: ...").
func oneResource(extra string) string {
	return fmt.Sprintf(`
config:
  resources: [{version: v1, resource: configmaps, sinks: [out]%s}]
  sinks: [{name: out, type: stdout}]
`, extra)
}

func TestMistakesAcrossFieldsFailAtInstallNamingTheFieldAndValue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   []string // every part must appear in the error
	}{
		{"a resource routed to a sink that is not defined", `
config:
  resources:
    - {version: v1, resource: configmaps, sinks: [out]}
    - {version: v1, resource: secrets, sinks: [out, kafka]}
  sinks: [{name: out, type: stdout}, {name: audit, type: stdout}]`,
			[]string{`config.resources[1].sinks[1] "kafka"`, "no sink of that name", `(defined: "out", "audit")`}},
		{"a sink defined twice", `
config:
  sinks: [{name: out, type: stdout}, {name: out, type: stdout, overflow: conflate}]`,
			[]string{`config.sinks[1].name "out"`, "already the name of config.sinks[0]"}},
		{"a resource listed twice", `
config:
  resources:
    - {group: apps, version: v1, resource: deployments, sinks: [out]}
    - {group: apps, version: v1, resource: deployments, namespaces: [a], sinks: [out]}`,
			[]string{"config.resources[1]", `group "apps" resource "deployments"`, "already watched by config.resources[0]"}},
		{"a label selector requirement without a key", oneResource(`, labelSelector: "=x"`),
			[]string{`config.resources[0].labelSelector "=x"`, "no label key"}},
		{"a label selector with a trailing comma", oneResource(`, labelSelector: "app=web,"`),
			[]string{`config.resources[0].labelSelector "app=web,"`, "empty requirement"}},
		{"a label selector with two commas in a row", oneResource(`, labelSelector: "app=web,,tier=db"`),
			[]string{`config.resources[0].labelSelector "app=web,,tier=db"`, "empty requirement"}},
		{"a field selector requirement without a field", oneResource(`, fieldSelector: "metadata.name=x,=y"`),
			[]string{`config.resources[0].fieldSelector "metadata.name=x,=y"`, `the requirement "=y" has no field name`}},
		{"a field selector of blanks", oneResource(`, fieldSelector: "  "`),
			[]string{`config.resources[0].fieldSelector "  "`, "only blanks"}},
		{"a field selector requirement without an operator", oneResource(`, fieldSelector: "status.phase"`),
			[]string{`config.resources[0].fieldSelector "status.phase"`, "no operator"}},
		{"a drain timeout the grace period cuts short", `
config: {dispatch: {drainTimeout: 1m30s}}
terminationGracePeriodSeconds: 60`,
			[]string{"terminationGracePeriodSeconds 60", "config.dispatch.drainTimeout (90s)"}},
		{"the default drain timeout with a shorter grace period", `terminationGracePeriodSeconds: 20`,
			[]string{"terminationGracePeriodSeconds 20", "config.dispatch.drainTimeout (30s)"}},
		{"leader election durations client-go refuses", `
replicaCount: 2
leaderElection: {leaseDuration: 10s, renewDeadline: 10s}`,
			[]string{"leaderElection", "leaseDuration 10s", "renewDeadline 10s", "leaseDuration > renewDeadline > 1.2 x retryPeriod"}},
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

func TestConfigsTheCrossFieldChecksAcceptStillRender(t *testing.T) {
	for _, tc := range []struct{ name, values string }{
		{"a set-based label selector whose commas are inside parentheses", oneResource(`, labelSelector: "tier in (web, db),!canary"`)},
		{"a label selector of blanks, which kubewire treats as none", oneResource(`, labelSelector: " "`)},
		{"a field selector with an escaped comma is left to kubewire", oneResource(`, fieldSelector: 'metadata.name=a\,b'`)},
		{"leader election durations in minutes and milliseconds", `
replicaCount: 2
leaderElection: {leaseDuration: 1m, renewDeadline: 45s, retryPeriod: 1500ms}`},
		{"a long drain with a longer grace period", `
config: {dispatch: {drainTimeout: 2m}}
terminationGracePeriodSeconds: 150`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, "kw", "platform", tc.values)
			checkConfigLoads(t, r)
		})
	}
}

// TestTheChartNeverRefusesASelectorKubewireAccepts runs selectors through
// both the chart and kubewire's own config loader: the chart may catch
// fewer mistakes than kubewire, never refuse a selector kubewire takes.
func TestTheChartNeverRefusesASelectorKubewireAccepts(t *testing.T) {
	selectors := []string{
		"app=web", "app=web,tier!=cache", "app==web", "app", "!app", "tier in (web, db)", "tier notin (a),app",
		"app=", " ", ",", "app=web,", ",app=web", "a=b,,c=d", "=x", "!=x", "==x", "a=b, =x", "a=b c",
		"metadata.name=x", "metadata.name!=x,status.phase=Running", "metadata.name=x,=y", "metadata.name", "a=b,",
		"  ", "a=b, ", `metadata.name=a\,b`, "a = b",
	}
	for _, field := range []string{"labelSelector", "fieldSelector"} {
		for _, sel := range selectors {
			t.Run(fmt.Sprintf("%s %q", field, sel), func(t *testing.T) {
				y := oneResource(fmt.Sprintf(", %s: %q", field, sel))
				_, chartErr := packaging.Render(chartDir, packaging.Release{Name: "kw", Namespace: "platform", Values: values(t, y)})
				cfg := fmt.Sprintf("apiVersion: kubewire.io/v1alpha1\nkind: Config\ncluster: c\nresources: [{version: v1, resource: configmaps, sinks: [out], %s: %q}]\nsinks: [{name: out, type: stdout}]\n", field, sel)
				_, kwErr := config.Parse([]byte(cfg), app.DefaultRegistry())
				if chartErr != nil && kwErr == nil {
					t.Errorf("the chart refuses what kubewire accepts: %v", chartErr)
				}
				if chartErr != nil && !strings.Contains(chartErr.Error(), "config.resources[0]."+field) {
					t.Errorf("the chart's error does not name config.resources[0].%s: %v", field, chartErr)
				}
			})
		}
	}
}
