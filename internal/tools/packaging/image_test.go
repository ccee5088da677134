package packaging_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the tests read from the Dockerfile.
type dockerfile struct {
	froms      []string          // FROM images, in order
	labels     map[string]string // LABELs of every stage, expanded
	env        map[string]string // ENV of the build stage
	args       map[string]string // ARG defaults
	buildEnv   map[string]string // NAME=value words before go build
	buildArgs  []string          // go build's arguments, expanded
	user       string            // the final stage's USER
	entrypoint string
	copies     []string
}

// readDockerfile parses the subset of Dockerfile syntax ours uses. Line
// continuations are joined; RUN options (--mount=...) are skipped.
func readDockerfile(t *testing.T, vars map[string]string) dockerfile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{env: map[string]string{}, args: map[string]string{}, buildEnv: map[string]string{}, labels: map[string]string{}}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			words := shellWords(t, rest, nil)
			words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--") })
			d.froms = append(d.froms, words[0])
		case "ARG":
			name, def, _ := strings.Cut(strings.TrimSpace(rest), "=")
			d.args[name] = def
		case "ENV":
			for _, w := range shellWords(t, rest, nil) {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: use the KEY=value form", rest)
				}
				d.env[k] = v
			}
		case "LABEL":
			for _, w := range shellWords(t, rest, vars) {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					t.Fatalf("Dockerfile: LABEL %q: use the key=value form", rest)
				}
				d.labels[k] = v
			}
		case "USER":
			d.user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			d.entrypoint = strings.TrimSpace(rest)
		case "COPY":
			d.copies = append(d.copies, strings.TrimSpace(rest))
		case "RUN":
			if !strings.Contains(rest, "go build") {
				continue
			}
			if d.buildArgs != nil {
				t.Fatal("Dockerfile: more than one go build line")
			}
			words := shellWords(t, rest, vars)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:] // RUN options such as --mount
			}
			for len(words) > 0 && strings.Contains(words[0], "=") {
				k, v, _ := strings.Cut(words[0], "=")
				d.buildEnv[k] = v
				words = words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("Dockerfile: the go build line must be [VAR=value...] go build ...; got %q", words)
			}
			d.buildArgs = words[2:]
		}
	}
	if d.buildArgs == nil {
		t.Fatal("Dockerfile: no RUN ... go build line")
	}
	return d
}

// shellWords splits s as sh would for the quoting our Dockerfile uses:
// single and double quotes, and $NAME or ${NAME} expanded from vars
// (unknown names are an error, so a renamed ARG cannot slip by as "").
func shellWords(t *testing.T, s string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'' && c != '\'':
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			switch quote {
			case 0:
				quote, inWord = c, true
			case c:
				quote = 0
			default:
				cur.WriteByte(c)
			}
		case c == '$' && vars != nil:
			name := ""
			if i+1 < len(s) && s[i+1] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					t.Fatalf("Dockerfile: unclosed ${ in %q", s)
				}
				name = s[i+2 : i+end]
				i += end
			} else {
				j := i + 1
				for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
					j++
				}
				name = s[i+1 : j]
				i = j - 1
			}
			v, ok := vars[name]
			if !ok {
				t.Fatalf("Dockerfile: $%s is not a known build argument", name)
			}
			cur.WriteString(v)
			inWord = true
		case quote == 0 && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("Dockerfile: unclosed quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// pinnedImage is an image reference pinned by digest: name:tag@sha256:<hex>.
var pinnedImage = regexp.MustCompile(`^([^@]+)@sha256:[0-9a-f]{64}$`)

// TestTheImageDefinitionMeetsTheRelease checks what the Dockerfile promises
// without building it: a Go build stage on the module's Go version and a
// distroless non-root final stage running /kubewire, both pinned by digest;
// the version, commit and date build arguments stamped into the binary and
// into the OCI labels.
func TestTheImageDefinitionMeetsTheRelease(t *testing.T) {
	vars := map[string]string{"TARGETOS": "linux", "TARGETARCH": "amd64", "VERSION": "v1.2.3", "COMMIT": "0123abc", "DATE": "2026-11-23T19:47:13Z"}
	d := readDockerfile(t, vars)
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := ""
	for _, line := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			parts := strings.Split(strings.TrimSpace(v), ".")
			goVersion = parts[0] + "." + parts[1]
		}
	}
	wantFroms := []string{"golang:" + goVersion, "gcr.io/distroless/static-debian12:nonroot"}
	if len(d.froms) != len(wantFroms) {
		t.Errorf("stages are %v, want %v, each pinned by digest", d.froms, wantFroms)
	}
	for i, from := range d.froms {
		m := pinnedImage.FindStringSubmatch(from)
		if m == nil {
			t.Errorf("FROM %s is not pinned by digest (want %s@sha256:<64 hex>)", from, wantFroms[min(i, len(wantFroms)-1)])
			continue
		}
		if i < len(wantFroms) && m[1] != wantFroms[i] {
			t.Errorf("stage %d is %s, want %s", i, m[1], wantFroms[i])
		}
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "kubewire",
		"org.opencontainers.image.source":   "https://github.com/kubewire/kubewire",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  vars["VERSION"],
		"org.opencontainers.image.revision": vars["COMMIT"],
		"org.opencontainers.image.created":  vars["DATE"],
	}
	for k, v := range wantLabels {
		if d.labels[k] != v {
			t.Errorf("LABEL %s=%q, want %q", k, d.labels[k], v)
		}
	}
	if d.labels["org.opencontainers.image.description"] == "" {
		t.Error("no LABEL org.opencontainers.image.description")
	}
	const pkg = "github.com/kubewire/kubewire/internal/base/version."
	ldflags := ""
	if i := slices.Index(d.buildArgs, "-ldflags"); i >= 0 && i+1 < len(d.buildArgs) {
		ldflags = d.buildArgs[i+1]
	}
	for _, x := range []string{"Version=" + vars["VERSION"], "Commit=" + vars["COMMIT"], "Date=" + vars["DATE"]} {
		if !strings.Contains(ldflags, "-X "+pkg+x) {
			t.Errorf("go build -ldflags %q lacks -X %s%s", ldflags, pkg, x)
		}
	}
	if d.user != "65532:65532" {
		t.Errorf("USER %q, want 65532:65532 (the chart's runAsUser)", d.user)
	}
	if d.entrypoint != `["/kubewire"]` {
		t.Errorf(`ENTRYPOINT %s, want ["/kubewire"]`, d.entrypoint)
	}
	if d.env["CGO_ENABLED"] != "0" {
		t.Errorf("the build stage does not set CGO_ENABLED=0: %v", d.env)
	}
	for _, arg := range []string{"VERSION", "COMMIT", "DATE"} {
		if _, ok := d.args[arg]; !ok {
			t.Errorf("no ARG %s to stamp the build with", arg)
		}
	}
	for _, want := range []string{"-trimpath", "-ldflags", "-o"} {
		if !slices.Contains(d.buildArgs, want) {
			t.Errorf("go build lacks %s: %q", want, d.buildArgs)
		}
	}
	out := d.buildArgs[slices.Index(d.buildArgs, "-o")+1]
	if !slices.Contains(d.copies, "--from=build "+out+" /kubewire") {
		t.Errorf("the final stage does not copy %s to /kubewire: %q", out, d.copies)
	}
}

// TestTheImageBinaryIsStatic builds kubewire exactly as the Dockerfile's
// build stage does (its environment and its go build line, with this
// machine's OS and architecture) and checks the result can run on a base
// image without a C library: no ELF interpreter, no shared libraries. No
// container engine runs on our machines, so this is how the image's build
// is tested.
func TestTheImageBinaryIsStatic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux; ELF checks need a linux build")
	}
	want := map[string]string{"version": "v0.0.0-imagetest", "commit": "0123456789abcdef", "date": "2026-11-23T19:47:13Z"}
	d := readDockerfile(t, map[string]string{
		"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
		"VERSION": want["version"], "COMMIT": want["commit"], "DATE": want["date"],
	})
	args := slices.Clone(d.buildArgs)
	bin := filepath.Join(t.TempDir(), "kubewire")
	args[slices.Index(args, "-o")+1] = bin

	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot // the Dockerfile's WORKDIR holds the whole module
	cmd.Env = os.Environ()
	for _, m := range []map[string]string{d.env, d.buildEnv} {
		for k, v := range m {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %q: %v\n%s", args, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter (PT_INTERP): it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries (DT_NEEDED) %v (err %v)", libs, err)
	}
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("the binary keeps section %s; -ldflags -s -w should drop it", s.Name)
		}
	}

	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(repoRoot)) {
		t.Errorf("the binary holds the build machine's path %s; -trimpath should remove it", repoRoot)
	}

	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v\n%s", bin, err, out)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("version -o json printed %q: %v", out, err)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("version -o json: %s is %q, want %q: the ldflags -X path is wrong", k, got[k], v)
		}
	}
}
