package app_test

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// registeredNames describes every collector register put in Registry and
// returns the kubewire_ metric names. Describe, unlike Gather, also sees a
// vector none of whose label values has been used yet. prometheus.Desc has
// no accessor for its name, so it is read from Desc.String(); the test
// checks that this finds names at all, so a change of that format fails
// here rather than passing with nothing to compare.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	app.DefaultRegistry() // registers every sink type's collectors
	for _, c := range metrics.Registered() {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read a metric name from %s", d)
			}
			if strings.HasPrefix(m[1], "kubewire_") {
				names[m[1]] = true
			}
		}
	}
	if !names["kubewire_events_observed_total"] {
		t.Fatalf("describing the registered collectors found %v, not even kubewire_events_observed_total", names)
	}
	return names
}

// documentedNames is the first column of the metrics table in the
// "## Metrics" section of docs/operations.md.
func documentedNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Metrics\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no "## Metrics" section`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	if !strings.Contains(section, "| metric | labels | meaning |") {
		t.Fatal("the Metrics section of docs/operations.md has no | metric | labels | meaning | table")
	}
	row := regexp.MustCompile("(?m)^\\| `(kubewire_[a-z0-9_]+)` \\|")
	names := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		names[m[1]] = true
	}
	return names
}

func TestEveryRegisteredKubewireMetricHasARowInTheOperationsMetricsTable(t *testing.T) {
	documented := documentedNames(t)
	var missing []string
	for name := range registeredNames(t) {
		if !documented[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("docs/operations.md's metrics table (## Metrics) has no row for:\n  %s", strings.Join(missing, "\n  "))
	}
}

func TestTheOperationsMetricsTableNamesNoMetricThatIsNotRegistered(t *testing.T) {
	registeredSet := registeredNames(t)
	var stale []string
	for name := range documentedNames(t) {
		if !registeredSet[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Fatalf("docs/operations.md's metrics table lists metrics kubewire does not register:\n  %s", strings.Join(stale, "\n  "))
	}
}

func TestEveryKubewireMetricInTheRegistryWasRegisteredThroughRegister(t *testing.T) {
	// A collector added with Registry.MustRegister directly would escape
	// the docs check above; those with a series at least show here.
	known := registeredNames(t)
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "kubewire_") && !known[n] {
			t.Errorf("%s is in Registry but was not added with metrics.Register", n)
		}
	}
}
