package nodecluster

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The quickstart's section on this cluster may only show commands that CI
// runs, so that what it tells a user to type is what is tested.
func TestEveryCommandOfTheQuickstartsNodeClusterSectionIsOneCIRuns(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## A real single-node cluster without kind\n")
	if !ok {
		t.Fatal(`docs/quickstart.md has no section "A real single-node cluster without kind"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) == 0 {
		t.Fatal("the section shows no commands")
	}
	commands := 0
	for _, b := range blocks {
		for _, line := range strings.Split(strings.TrimSpace(b[1]), "\n") {
			commands++
			cmd := strings.TrimPrefix(strings.TrimSpace(line), "sudo ")
			switch f := strings.Fields(cmd); {
			case len(f) > 3 && f[0] == "apt-get" && f[1] == "install":
				for _, pkg := range f[2:] {
					if strings.HasPrefix(pkg, "-") {
						continue
					}
					if !strings.Contains(string(ci), "pkgs+=("+pkg+")") {
						t.Errorf("%q: .ci/run does not install %s", line, pkg)
					}
				}
			case len(f) == 2 && f[0] == "make":
				if !regexp.MustCompile(`(?m)^stage .*\bmake ` + regexp.QuoteMeta(f[1]) + `$`).Match(ci) {
					t.Errorf("%q: .ci/run has no stage running it", line)
				}
			default:
				t.Errorf("%q: not a command this test knows CI runs", line)
			}
		}
	}
	if commands < 3 {
		t.Errorf("only %d commands checked", commands)
	}
}
