package encoding

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
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
