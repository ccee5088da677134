package packaging_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestMakeReleaseBuildsStampedBinariesWithChecksumsSBOMsAndTheChart runs
// `make release` as a maintainer does, for this machine's platform only (all
// four take minutes on two cores), and checks every artifact: the binary runs
// and reports the version, commit and commit time it was stamped with; it is
// built static and trimmed; SHA256SUMS covers exactly the artifacts and
// matches them; the SBOM is CycloneDX naming the module and every module
// compiled into the binary; the chart archive loads with Helm's loader and
// carries the commit time, so packaging is reproducible.
func TestMakeReleaseBuildsStampedBinariesWithChecksumsSBOMsAndTheChart(t *testing.T) {
	if testing.Short() {
		t.Skip("the first run installs the SBOM tool through the Go module proxy")
	}
	const version = "v0.0.0-releasetest"
	commit, date := gitHead(t)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	bin := "kubewire-" + runtime.GOOS + "-" + runtime.GOARCH
	srcChart, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	tgz := "kubewire-" + srcChart.Metadata.Version + ".tgz"

	dist := t.TempDir()
	start := time.Now()
	cmd := exec.Command("make", "release", "PLATFORMS="+platform, "DIST="+dist, "VERSION="+version)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release for %s took %s", platform, time.Since(start).Round(time.Second))

	want := []string{"SHA256SUMS", bin, bin + ".cdx.json", tgz}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %q, want %q", dist, got, want)
	}
	for _, name := range want {
		if !strings.Contains(string(out), filepath.Join(dist, name)) {
			t.Errorf("make release does not say it built %s:\n%s", name, out)
		}
	}

	t.Run("the binary reports the stamped version, commit and commit time", func(t *testing.T) {
		path := filepath.Join(dist, bin)
		raw, err := exec.Command(path, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("%s version -o json: %v", path, err)
		}
		var info map[string]string
		if err := json.Unmarshal(raw, &info); err != nil {
			t.Fatalf("version -o json printed %q: %v", raw, err)
		}
		for k, v := range map[string]string{"version": version, "commit": commit, "date": date, "platform": platform, "goVersion": runtime.Version()} {
			if info[k] != v {
				t.Errorf("version -o json: %s is %q, want %q", k, info[k], v)
			}
		}
	})

	t.Run("the binary is built static, trimmed and stripped", func(t *testing.T) {
		bi, err := buildinfo.ReadFile(filepath.Join(dist, bin))
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH} {
			if settings[k] != v {
				t.Errorf("build setting %s=%q, want %q", k, settings[k], v)
			}
		}
		// -trimpath keeps -ldflags out of the build info, so look for -s -w's
		// effect: no symbol table.
		if runtime.GOOS == "linux" {
			f, err := elf.Open(filepath.Join(dist, bin))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Section(".symtab") != nil {
				t.Error("the binary keeps its symbol table; -ldflags -s -w should drop it")
			}
		}
	})

	t.Run("SHA256SUMS lists every other artifact once with its digest", func(t *testing.T) {
		f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		listed := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sha256sum's format: 64 hex digits, two spaces (text mode), the name.
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok || len(sum) != 64 || strings.Contains(name, "/") {
				t.Fatalf("SHA256SUMS line %q is not <sha256>  <name>", sc.Text())
			}
			if _, dup := listed[name]; dup {
				t.Errorf("SHA256SUMS lists %s twice", name)
			}
			listed[name] = sum
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		for _, name := range want {
			if name == "SHA256SUMS" {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(dist, name))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(raw)
			if listed[name] != hex.EncodeToString(sum[:]) {
				t.Errorf("SHA256SUMS has %q for %s, the file's digest is %x", listed[name], name, sum)
			}
			delete(listed, name)
		}
		if len(listed) > 0 {
			t.Errorf("SHA256SUMS lists files that were not built: %v", listed)
		}
	})

	t.Run("the SBOM is CycloneDX naming the module and every module in the binary", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dist, bin+".cdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		type component struct {
			Type, Name, Version, Purl string
		}
		var bom struct {
			BOMFormat   string `json:"bomFormat"`
			SpecVersion string `json:"specVersion"`
			Metadata    struct {
				Component component
			}
			Components []component
		}
		if err := json.Unmarshal(raw, &bom); err != nil {
			t.Fatalf("the SBOM is not JSON: %v", err)
		}
		if bom.BOMFormat != "CycloneDX" || !strings.HasPrefix(bom.SpecVersion, "1.") {
			t.Errorf("bomFormat %q specVersion %q, want CycloneDX 1.x", bom.BOMFormat, bom.SpecVersion)
		}
		main := bom.Metadata.Component
		if main.Type != "application" || main.Name != "github.com/kubewire/kubewire" || main.Version != version {
			t.Errorf("the SBOM describes %+v, want the application github.com/kubewire/kubewire %s", main, version)
		}
		inSBOM := map[string]string{}
		for _, c := range bom.Components {
			inSBOM[c.Name] = c.Version
		}
		bi, err := buildinfo.ReadFile(filepath.Join(dist, bin))
		if err != nil {
			t.Fatal(err)
		}
		if len(bi.Deps) == 0 {
			t.Fatal("the binary records no module dependencies")
		}
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			if v, ok := inSBOM[d.Path]; !ok || v != d.Version {
				t.Errorf("the binary holds %s %s; the SBOM lists it as %q (present: %v)", d.Path, d.Version, v, ok)
			}
		}
		if inSBOM["std"] != bi.GoVersion {
			t.Errorf("the SBOM lists the standard library (std) at %q, want %s, so that Go's own vulnerabilities match it", inSBOM["std"], bi.GoVersion)
		}
	})

	t.Run("the chart archive loads with Helm and is stamped with the commit time", func(t *testing.T) {
		path := filepath.Join(dist, tgz)
		ch, err := loader.Load(path)
		if err != nil {
			t.Fatalf("helm's loader rejects %s: %v", path, err)
		}
		if err := ch.Validate(); err != nil {
			t.Errorf("the packaged chart does not validate: %v", err)
		}
		if ch.Name() != "kubewire" || ch.Metadata.Version != srcChart.Metadata.Version || ch.Metadata.AppVersion != srcChart.Metadata.AppVersion {
			t.Errorf("packaged %s %s (app %s), want kubewire %s (app %s)", ch.Name(), ch.Metadata.Version, ch.Metadata.AppVersion,
				srcChart.Metadata.Version, srcChart.Metadata.AppVersion)
		}
		if len(ch.Templates) != len(srcChart.Templates) || ch.Schema == nil {
			t.Errorf("packaged %d templates (schema %t), the chart has %d", len(ch.Templates), ch.Schema != nil, len(srcChart.Templates))
		}
		commitTime, err := time.Parse(time.RFC3339, date)
		if err != nil {
			t.Fatal(err)
		}
		var off []string
		for name, mtime := range tarTimes(t, path) {
			if !mtime.Equal(commitTime) {
				off = append(off, name+" "+mtime.UTC().Format(time.RFC3339))
			}
		}
		if len(off) > 0 {
			slices.Sort(off)
			t.Errorf("%d files in the archive are not dated at the commit time %s, so packaging is not reproducible; e.g. %s",
				len(off), date, off[0])
		}
	})
}

// gitHead is what make release stamps: HEAD's full revision (marked -dirty
// when tracked files differ from it) and its commit time.
func gitHead(t *testing.T) (commit, date string) {
	t.Helper()
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v (make release stamps the commit from git)", err)
	}
	if _, err := git("diff", "--quiet", "HEAD"); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatal(err)
		}
		commit += "-dirty"
	}
	date, err = git("log", "-1", "--format=%cI")
	if err != nil {
		t.Fatal(err)
	}
	return commit, date
}

// tarTimes returns the modification time of each entry of a .tgz.
func tarTimes(t *testing.T, path string) map[string]time.Time {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	times := map[string]time.Time{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return times
		}
		if err != nil {
			t.Fatal(err)
		}
		times[h.Name] = h.ModTime
	}
}
