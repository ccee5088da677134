package encoding

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
)

func TestExtensionsListsEveryExtensionConstant(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "extensions.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Ext") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			v, _ := strconv.Unquote(lit.Value)
			names = append(names, v)
		}
		return true
	})
	got := slices.Sorted(slices.Values(Extensions))
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("Extensions = %v, the Ext constants are %v", got, names)
	}
}

func TestExtensionReadsAStringExtensionWithoutCopyingTheMap(t *testing.T) {
	for _, v := range []string{event.CloudEventsVersionV1, event.CloudEventsVersionV03} {
		ev := event.New(v)
		ev.SetExtension("partitionkey", "configmaps/team-a/x")
		ev.SetExtension("count", 3)
		if got := Extension(&ev, "partitionkey"); got != "configmaps/team-a/x" {
			t.Errorf("%s: partitionkey = %q", v, got)
		}
		// What ev.Extensions()[name].(string) gives: "" for a missing or
		// non-string extension.
		for _, name := range []string{"count", "absent"} {
			want, _ := ev.Extensions()[name].(string)
			if got := Extension(&ev, name); got != want {
				t.Errorf("%s: %s = %q, want %q", v, name, got, want)
			}
		}
		if n := testing.AllocsPerRun(100, func() { Extension(&ev, "partitionkey") }); n != 0 {
			t.Errorf("%s: Extension allocates %v times per call; ev.Extensions() would copy the map", v, n)
		}
	}
}

// The changedby values are boxed once per resource, and a client that
// invents field manager names cannot grow what is kept.
func TestBoxedChangedByValuesAreBoundedAndUnchanged(t *testing.T) {
	ra := &resourceAttributes{}
	for i := range 3 * maxBoxed {
		s := "manager-" + strconv.Itoa(i)
		if got := ra.box(s); got != s {
			t.Fatalf("box(%q) = %v", s, got)
		}
	}
	if n := ra.nBoxed.Load(); n != maxBoxed {
		t.Errorf("kept %d boxed values, want the bound %d", n, maxBoxed)
	}
	if n := testing.AllocsPerRun(100, func() { _ = ra.box("manager-1") }); n != 0 {
		t.Errorf("boxing a kept value allocates %v times", n)
	}
}
