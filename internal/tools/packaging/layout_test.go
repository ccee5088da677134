package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeTable returns the paths in the first column of the table that
// follows the line starting with heading in README.md.
func readmeTable(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, heading)
	if i < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	var paths []string
	inTable := false
	cell := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(s[i:], "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	return paths
}

func TestTheREADMEListsExactlyTheInternalPackagesTheBinaryShips(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/kubewire")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var shipped []string
	for _, p := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(p, "github.com/kubewire/kubewire/internal/"); ok {
			shipped = append(shipped, "internal/"+rest)
		}
	}
	listed := readmeTable(t, "Internal packages that ship in the binary")
	slices.Sort(shipped)
	slices.Sort(listed)
	if !slices.Equal(shipped, listed) {
		t.Errorf("README lists %v as shipping in the binary; the binary imports %v", listed, shipped)
	}
	testOnly := readmeTable(t, "For tests, benchmarks and the demo only")
	for _, p := range testOnly {
		if slices.Contains(shipped, p) {
			t.Errorf("README lists %s as test-only, but the binary imports it", p)
		}
	}
	// Every internal package is in one of the two tables.
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "internal", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		p := "internal/" + filepath.Base(d)
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		under := func(l string) bool { return l == p || strings.HasPrefix(l, p+"/") }
		if !slices.ContainsFunc(shipped, under) && !slices.ContainsFunc(testOnly, under) {
			t.Errorf("README's layout does not list %s", p)
		}
	}
}
