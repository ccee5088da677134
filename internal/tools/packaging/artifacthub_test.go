package packaging_test

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// repoFile maps a URL of a file in kubewire's GitHub repository on main
// (raw, blob or tree) to its path in this checkout.
func repoFile(t *testing.T, url string) string {
	t.Helper()
	m := regexp.MustCompile(`^https://(?:raw\.githubusercontent\.com/kubewire/kubewire/main|github\.com/kubewire/kubewire/(?:blob|tree)/main)/(.+)$`).FindStringSubmatch(url)
	if m == nil {
		t.Fatalf("%s is not a file of github.com/kubewire/kubewire on main", url)
	}
	return filepath.Join(repoRoot, filepath.FromSlash(m[1]))
}

func TestTheChartCarriesItsIconAndArtifactHubAnnotations(t *testing.T) {
	c, err := packaging.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	md := c.Metadata

	// The icon is an SVG in this repository, served raw from main.
	icon := repoFile(t, md.Icon)
	b, err := os.ReadFile(icon)
	if err != nil {
		t.Fatalf("the chart's icon %s: %v", md.Icon, err)
	}
	var svg struct{ XMLName xml.Name }
	if err := xml.Unmarshal(b, &svg); err != nil || svg.XMLName.Local != "svg" {
		t.Errorf("%s is not an SVG document (root %q, %v)", icon, svg.XMLName.Local, err)
	}

	ann := md.Annotations
	if ann["artifacthub.io/license"] != "Apache-2.0" {
		t.Errorf("artifacthub.io/license %q, want Apache-2.0", ann["artifacthub.io/license"])
	}
	if lic, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE")); err == nil && !strings.Contains(string(lic), "Apache License") {
		t.Error("LICENSE is not the Apache License the chart's annotation names")
	}
	categories := []string{"ai-machine-learning", "database", "integration-delivery", "monitoring-logging",
		"networking", "security", "storage", "streaming-messaging"}
	if !slices.Contains(categories, ann["artifacthub.io/category"]) {
		t.Errorf("artifacthub.io/category %q is not one of Artifact Hub's %v", ann["artifacthub.io/category"], categories)
	}

	var links []struct{ Name, URL string }
	unmarshalAnnotation(t, ann, "artifacthub.io/links", &links)
	for _, l := range links {
		if l.Name == "" {
			t.Errorf("link %s has no name", l.URL)
		}
		if _, err := os.Stat(repoFile(t, l.URL)); err != nil {
			t.Errorf("link %q points at a file this repository lacks: %v", l.Name, err)
		}
	}

	var changes []struct{ Kind, Description string }
	unmarshalAnnotation(t, ann, "artifacthub.io/changes", &changes)
	for _, ch := range changes {
		if !slices.Contains([]string{"added", "changed", "deprecated", "removed", "fixed", "security"}, ch.Kind) || ch.Description == "" {
			t.Errorf("change %+v needs a kind Artifact Hub knows and a description", ch)
		}
	}

	// The images listed are the ones the chart's defaults run.
	var images []struct{ Name, Image string }
	unmarshalAnnotation(t, ann, "artifacthub.io/images", &images)
	var listed []string
	for _, im := range images {
		listed = append(listed, im.Image)
	}
	vals := c.Values
	image := vals["image"].(map[string]any)
	tests := vals["tests"].(map[string]any)["image"].(map[string]any)
	for _, want := range []string{
		image["repository"].(string) + ":" + md.AppVersion,
		tests["repository"].(string) + "@" + tests["digest"].(string),
	} {
		if !slices.Contains(listed, want) {
			t.Errorf("artifacthub.io/images lists %v, not %s, which the chart runs", listed, want)
		}
	}
	if len(listed) != 2 {
		t.Errorf("artifacthub.io/images lists %d images; the chart runs 2", len(listed))
	}
}

func unmarshalAnnotation(t *testing.T, ann map[string]string, key string, v any) {
	t.Helper()
	raw, ok := ann[key]
	if !ok {
		t.Fatalf("Chart.yaml has no %s annotation", key)
	}
	if err := yaml.UnmarshalStrict([]byte(raw), v); err != nil {
		t.Fatalf("%s: %v\n%s", key, err, raw)
	}
	if strings.TrimSpace(raw) == "" || strings.TrimSpace(raw) == "[]" {
		t.Fatalf("%s is empty", key)
	}
}
