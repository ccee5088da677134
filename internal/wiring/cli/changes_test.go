package cli_test

import (
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// cmEvent is a structured-mode CloudEvent of a ConfigMap, as the stdout
// sink writes it, one line.
func cmEvent(typ, rv, level, by string) string {
	return `{"specversion":"1.0","id":"uid-1/` + rv + `/` + typ + `","source":"kubewire/demo","type":"io.kubewire.object.` + typ + `",` +
		`"time":"2026-11-26T18:00:00Z","partitionkey":"configmaps/demo/settings-0","resourceversion":"` + rv + `","changedby":"` + by + `",` +
		`"datacontenttype":"application/json","data":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings-0","namespace":"demo","resourceVersion":"` + rv + `"},"data":{"level":"` + level + `","mode":"fast"}}}`
}

func TestPrintChangesShowsEachEventAsARowAndAnUpdatesChangedFieldsWithOldAndNewValues(t *testing.T) {
	in := strings.Join([]string{
		cmEvent("added", "100", "9", "demo"),
		cmEvent("updated", "101", "10", "kubectl-edit"),
		"not an event: copied through",
	}, "\n") + "\n"
	var out strings.Builder
	if err := cli.PrintChanges(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, two rows and the copied line, got\n%s", out.String())
	}
	for i, want := range [][]string{
		{"TIME", "TYPE", "OBJECT", "RV", "BY", "ID", "NOTE"},
		{"2026-11-26T18:00:00.000Z", "added", "configmaps/demo/settings-0", "100", "demo", "uid-1/100/added"},
		{"updated", "configmaps/demo/settings-0", "101", "kubectl-edit", "uid-1/101/updated", "data.level: 9 → 10"},
		{"not an event: copied through"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if strings.Contains(lines[0], "PARTITION") {
		t.Errorf("the stdout sink has no partitions, but the header has the column: %q", lines[0])
	}
	if strings.Contains(lines[2], "mode") || strings.Contains(lines[2], "resourceVersion") {
		t.Errorf("an unchanged field or the resourceVersion is listed as a change: %q", lines[2])
	}
}

func TestAnUpdateRowNamesTheFirstThreeChangesAndCountsTheRest(t *testing.T) {
	ev := func(typ, rv, data string) string {
		return `{"specversion":"1.0","id":"u/` + rv + `","source":"s","type":"io.kubewire.object.` + typ + `","partitionkey":"configmaps/ns/x",` +
			`"data":{"metadata":{"name":"x","resourceVersion":"` + rv + `"},"data":` + data + `}}`
	}
	in := ev("added", "1", `{"a":"1","b":"1","c":"1","d":"1","gone":"x"}`) + "\n" +
		ev("updated", "2", `{"a":"2","b":"2","c":"2","d":"2","new":"y"}`) + "\n"
	var out strings.Builder
	if err := cli.PrintChanges(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "data.a: 1 → 2, data.b: 1 → 2, data.c: 1 → 2, +3 more"
	if !strings.Contains(out.String(), want) {
		t.Errorf("want %q in\n%s", want, out.String())
	}
}
