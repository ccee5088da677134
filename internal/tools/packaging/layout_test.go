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

// floor says where a package of the module sits. Shipped code is built in
// floors: the leaves (internal/base) at the bottom, the engine in the middle
// (informer, then encoding, then the sink contract and its adapters, then
// dispatch and consumer), the program's wiring (internal/wiring) above it
// and the thin main on top. A package imports only from its own floor or
// below. Test-only code (floor testOnly) may import anything, and nothing
// shipped may import it, not even through another package.
func floor(pkg string) (rank int, ok bool) {
	under := func(dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
	switch {
	case under("internal/testing"), under("internal/tools"), under("test"), under("examples"),
		under("sinks/sinktest"):
		return testOnly, true
	case under("internal/base"):
		return 0, true
	case under("informer"):
		return 1, true
	case under("encoding"):
		return 2, true
	case under("sinks"):
		return 3, true
	case under("dispatch"), under("consumer"):
		return 4, true
	case under("internal/wiring"):
		return 5, true
	case under("cmd"):
		return 6, true
	}
	return 0, false
}

const testOnly = -1

var floorNames = map[int]string{testOnly: "test-only", 0: "leaves (internal/base)", 1: "engine: informer",
	2: "engine: encoding", 3: "engine: sinks", 4: "engine: dispatch and consumer", 5: "wiring (internal/wiring)", 6: "main (cmd)"}

func TestShippedPackagesImportOnlyFromTheirFloorOrBelowAndNeverTestOnlyCode(t *testing.T) {
	const module = "github.com/kubewire/kubewire/"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	ours := func(list string) []string {
		var ps []string
		for _, p := range strings.Fields(list) {
			if rest, ok := strings.CutPrefix(p, module); ok {
				ps = append(ps, rest)
			}
		}
		return ps
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 20 {
		t.Fatalf("go list found only %d packages", len(lines))
	}
	for _, line := range lines {
		fields := strings.SplitN(line, "|", 3)
		pkg := strings.TrimPrefix(fields[0], module)
		rank, ok := floor(pkg)
		if !ok {
			t.Errorf("%s is on no floor: put it under internal/base, the engine, internal/wiring, or a test-only folder (and say which in docs/architecture.md)", pkg)
			continue
		}
		if rank == testOnly {
			continue
		}
		for _, imp := range ours(fields[1]) {
			if r, ok := floor(imp); ok && r > rank {
				t.Errorf("%s (%s) imports %s (%s), a floor above it", pkg, floorNames[rank], imp, floorNames[r])
			}
		}
		for _, dep := range ours(fields[2]) {
			if r, ok := floor(dep); ok && r == testOnly {
				t.Errorf("%s ships but depends on the test-only package %s", pkg, dep)
			}
		}
	}
}
