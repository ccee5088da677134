package examples_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/sinks/kafka"
)

// goBlocks returns the ```go blocks of a Markdown file.
func goBlocks(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// docsImports are the packages the docs' example may use, by the name it
// calls them.
var docsImports = map[string]string{
	"consumer": "github.com/kubewire/kubewire/consumer", "cache": "k8s.io/client-go/tools/cache",
	"errors": "errors", "fmt": "fmt", "jetstream": "github.com/nats-io/nats.go/jetstream",
	"nats": "github.com/nats-io/nats.go", "slog": "log/slog", "time": "time",
}

// TestTheConsumerDocsExampleCompilesAndDiscardsNoError compiles the example
// of docs/consumer.md as the body of a function of ctx, url and react (the
// names it uses but does not declare), and checks that it assigns no call's
// result to _ and does not start Run without reading its error: a discarded
// nats.Connect error made a wrong address a nil pointer panic, a discarded
// Run error made a missing stream a silent hang.
func TestTheConsumerDocsExampleCompilesAndDiscardsNoError(t *testing.T) {
	blocks := goBlocks(t, filepath.Join("..", "docs", "consumer.md"))
	if len(blocks) == 0 {
		t.Fatal("docs/consumer.md has no ```go block")
	}
	body := blocks[0]
	imports := []string{`"context"`, `"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"`}
	for name, path := range docsImports {
		if strings.Contains(body, name+".") {
			imports = append(imports, `"`+path+`"`)
		}
	}
	sort.Strings(imports)
	src := "package main\n\nimport (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n" +
		"func example(ctx context.Context, url string, react func(*unstructured.Unstructured)) error {\n" + body + "}\n\n" +
		"func main() { _ = example }\n"

	f, err := parser.ParseFile(token.NewFileSet(), "example.go", src, 0)
	if err != nil {
		t.Fatalf("the example does not parse as a function body: %v\n%s", err, src)
	}
	ast.Inspect(f.Decls[len(f.Decls)-2], func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				// An error comes last: `x, _ := f()` and `_ = f()`
				// discard one; `_, err := f()` does not.
				last := i == len(n.Lhs)-1
				if id, ok := l.(*ast.Ident); ok && id.Name == "_" && last && isCall(n.Rhs[len(n.Rhs)-1]) {
					t.Errorf("docs/consumer.md's example discards the error of %s", render(src, n.Rhs[len(n.Rhs)-1]))
				}
			}
		case *ast.GoStmt:
			if sel, ok := n.Call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
				t.Errorf("docs/consumer.md's example starts %s without reading its error", render(src, n.Call))
			}
		case *ast.ExprStmt:
			if c, ok := n.X.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
					t.Errorf("docs/consumer.md's example discards the error of %s", render(src, c))
				}
			}
		}
		return true
	})

	// Build it as a package of this module, without writing into it.
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := filepath.Abs("docsexample")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): file}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "-overlay", filepath.Join(dir, "overlay.json"), "./docsexample")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/consumer.md's example does not compile: %v\n%s\nas\n%s", err, out, src)
	}
}

func isCall(e ast.Expr) bool {
	_, ok := e.(*ast.CallExpr)
	return ok
}

func render(src string, n ast.Node) string {
	// Offsets are 1-based positions in src, as parsed with one file.
	return src[n.Pos()-1 : n.End()-1]
}

// TestTheExamplesNameTopicsTheKafkaSinkWritesByDefault reads the topics the
// examples' READMEs, their usage lines and docs/consumer.md pass with
// --topic: each must be one the Kafka sink's default topic template gives,
// so that a user who copies a command reads what kubewire writes (they once
// named kubewire.configmaps, which it never writes).
func TestTheExamplesNameTopicsTheKafkaSinkWritesByDefault(t *testing.T) {
	def := regexp.QuoteMeta(kafka.DefaultTopic)
	for _, p := range []string{"group", "resource"} {
		def = strings.ReplaceAll(def, regexp.QuoteMeta("{"+p+"}"), "[a-z0-9][a-z0-9.-]*")
	}
	isDefault := regexp.MustCompile("^" + def + "$")
	files := []string{filepath.Join("..", "docs", "consumer.md")}
	for _, glob := range []string{"*/README.md", "*/main.go", "*/*.py"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	// A topic has a dot; "--topic is required" names none.
	topicFlag := regexp.MustCompile(`--topic[ =]([a-z0-9][^\s"` + "`" + `]*\.[^\s"` + "`" + `]*)`)
	seen := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range topicFlag.FindAllStringSubmatch(string(raw), -1) {
			seen++
			if topic := m[1]; !isDefault.MatchString(topic) {
				t.Errorf("%s names topic %q; the Kafka sink's default template %s never writes it", f, topic, kafka.DefaultTopic)
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no --topic in the examples: the test reads nothing")
	}
}

// docs/consumer.md names the client-go version the consumer package is
// built and tested with: the one go.mod requires.
func TestConsumerDocNamesTheClientGoVersionOfGoMod(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/client-go")
	}
	doc, err := os.ReadFile("../docs/consumer.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(doc)), " ")
	if !strings.Contains(flat, "built and tested with `k8s.io/client-go` "+string(m[1])) {
		t.Errorf("docs/consumer.md does not say it is built with k8s.io/client-go %s, the version go.mod requires", m[1])
	}
}
