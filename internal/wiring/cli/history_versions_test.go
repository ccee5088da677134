package cli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// versionRows runs history for one object and returns its table rows as
// "type rv", in the order printed.
func versionRows(t *testing.T, wantCode int, args ...string) (rows []string, stderr string) {
	t.Helper()
	code, out, errOut := run(append([]string{"history"}, args...)...)
	if code != wantCode {
		t.Fatalf("history %v: exit %d, want %d\n%s%s", args, code, wantCode, out, errOut)
	}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) < 4 {
			continue
		}
		rows = append(rows, f[1]+" "+f[3])
	}
	return rows, errOut
}

// In historyStream, a is listed at 1, updated at 3 and 6 (and listed again
// at 6 by s2), deleted at 8; c is added at 4 (listed again at 4), updated
// at 7, and listed at 9 by the snapshot after the gap (8, 10]: the version
// the gap hid.
func TestHistoryOfAnObjectPrintsEachOfItsVersionsInTheRangeOnce(t *testing.T) {
	env := newHistoryEnv(t)
	env.send(t, "events", historyStream()...)
	env.send(t, "events", historyStream()[5]) // a redelivery of c's add
	for _, tc := range []struct {
		name, object string
		args         []string
		want         []string
	}{
		{"a range before the gap", "widgets/team-a/a", []string{"--since", "rv:2", "--until", "rv:7"}, []string{"updated 3", "updated 6"}},
		{"a redelivered add and a snapshot record of a version already read are left out", "widgets.demo.kubewire.io/team-a/c", []string{"--until", "rv:8"}, []string{"added 4", "updated 7"}},
		{"the first version is inclusive", "widgets/team-a/a", []string{"--since", "rv:3", "--until", "rv:3"}, []string{"updated 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := versionRows(t, cli.ExitOK, append([]string{"--config", env.path, "--sink", "events", tc.object}, tc.args...)...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("history %s %v printed %v, want %v", tc.object, tc.args, got, tc.want)
			}
		})
	}
	t.Run("an update names the fields it changed since the version before the range", func(t *testing.T) {
		_, out, _ := run("history", "--config", env.path, "--sink", "events", "widgets/team-a/a", "--since", "rv:3", "--until", "rv:3")
		if !strings.Contains(out, "spec.size: 1 → 3") {
			t.Errorf("the update at 3 does not say what it changed from the version at 1:\n%s", out)
		}
	})
	t.Run("json prints the versions themselves", func(t *testing.T) {
		code, out, errOut := run("history", "--config", env.path, "--sink", "events", "widgets/team-a/c", "--until", "rv:8", "-o", "json")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var v struct {
				Type, ResourceVersion string
				Object                struct {
					Metadata struct{ ResourceVersion string }
				}
			}
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, v.Type+" "+v.ResourceVersion+" "+v.Object.Metadata.ResourceVersion)
		}
		if want := []string{"added 4 4", "updated 7 7"}; code != cli.ExitOK || !slices.Equal(got, want) {
			t.Errorf("exit %d, got %v, want %v\n%s", code, got, want, errOut)
		}
	})
}

func TestHistoryOfAnObjectPrintsWhatItReadAndExits5WhenAGapOverlapsTheRange(t *testing.T) {
	env := newHistoryEnv(t)
	env.send(t, "events", historyStream()...)
	for _, tc := range []struct {
		name, object string
		args         []string
		want         []string
	}{
		{"a range that ends in the gap", "widgets/team-a/a", []string{"--since", "rv:4", "--until", "rv:9"}, []string{"updated 6", "deleted 8"}},
		// The snapshot after the gap lists c at 9, a version the gap hid:
		// it is printed, and the gap still says others may be missing.
		{"a range across the gap", "widgets/team-a/c", []string{"--since", "rv:5"}, []string{"updated 7", "synced 9"}},
		{"no range at all", "widgets/team-a/a", nil, []string{"synced 1", "updated 3", "updated 6", "deleted 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errOut := versionRows(t, cli.ExitWatchGap, append([]string{"--config", env.path, "--sink", "events", tc.object}, tc.args...)...)
			if !slices.Equal(got, tc.want) || !strings.Contains(errOut, "(8, 10] may be missing") {
				t.Errorf("history %s %v printed %v, stderr %q; want %v and the gap (8, 10]", tc.object, tc.args, got, errOut, tc.want)
			}
		})
	}
}

func TestHistoryOfAnObjectExitsWithTheCodesOfWhatTheStreamCannotAnswer(t *testing.T) {
	env := newHistoryEnv(t)
	env.send(t, "compacted", historyStream()[:4]...)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		mention string
	}{
		{"a compacted topic", []string{"--sink", "compacted", "widgets/team-a/a"}, cli.ExitCompacted, `cleanup.policy "compact"`},
		{"payload reference", []string{"--sink", "refs", "configmaps/team-a/a"}, cli.ExitNotWhole, `payload "reference"`},
		{"a filter", []string{"--sink", "filtered", "secrets/team-a/a"}, cli.ExitNotWhole, "has a filter"},
		{"--at with an object", []string{"--sink", "events", "--at", "rv:2", "widgets/team-a/a"}, cli.ExitConfig, "do not go together"},
		{"--since without an object", []string{"--sink", "events", "--since", "rv:2"}, cli.ExitConfig, "go with an object"},
		{"an object of no routed resource", []string{"--sink", "events", "pods/team-a/a"}, cli.ExitConfig, `no resource "pods"`},
		{"an object that is not one", []string{"--sink", "events", "widgets"}, cli.ExitConfig, "RESOURCE/NAMESPACE/NAME"},
		{"a selector with an object", []string{"--sink", "events", "-l", "a=b", "widgets/team-a/a"}, cli.ExitConfig, "says which"},
		{"a bad --until", []string{"--sink", "events", "--until", "rv:x", "widgets/team-a/a"}, cli.ExitConfig, "--until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(append([]string{"history", "--config", env.path}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.mention) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, errOut, tc.code, tc.mention)
			}
		})
	}
}
