package shape

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/decls"
	"github.com/google/cel-go/common/stdlib"
	"github.com/google/cel-go/interpreter"
)

// FilterCostLimit bounds the work one evaluation may do, so that an
// expression that loops over a huge list cannot stall an informer's
// notification goroutine. Exceeding it is a runtime error, and runtime
// errors keep the event.
const FilterCostLimit = 1_000_000

// Filter is a compiled CEL filter expression. It is safe for concurrent use.
type Filter struct {
	src string
	prg cel.Program
}

// Issue is one problem in a filter expression. Line and Column are 1-based.
type Issue struct {
	Line, Column int
	Reason       string
}

// FilterError lists why an expression does not compile or type-check.
type FilterError struct {
	Expr   string
	Issues []Issue
}

func (e *FilterError) Error() string {
	parts := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		if is.Line > 0 {
			parts[i] = fmt.Sprintf("line %d, column %d: %s", is.Line, is.Column, is.Reason)
		} else {
			parts[i] = is.Reason
		}
	}
	return strings.Join(parts, "; ")
}

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

// filterEnv declares the variables of a filter: object, oldObject (null
// except on updates) and type ("added", "updated", "deleted", "synced").
//
// Why a custom environment: the standard library declares "type" as the
// identifier of the type-of-types, and CEL refuses a variable of the same
// name. The contract promises a variable called type, so the environment is
// the standard library's functions, macros and type identifiers minus that
// one identifier. type(x) the function still works; only comparing with the
// bare identifier "type" is lost, which no filter over objects needs.
func filterEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		var idents []*decls.VariableDecl
		for _, v := range stdlib.Types() {
			if v.Name() != "type" {
				idents = append(idents, v)
			}
		}
		celEnv, envErr = cel.NewCustomEnv(
			cel.FunctionDecls(stdlib.Functions()...),
			cel.Macros(cel.StandardMacros...),
			cel.VariableDecls(idents...),
			cel.Variable("object", cel.DynType),
			cel.Variable("oldObject", cel.DynType),
			cel.Variable("type", cel.StringType),
		)
	})
	return celEnv, envErr
}

// CompileFilter parses and type-checks expr, which must yield a bool.
// Problems in the expression are a *FilterError.
func CompileFilter(expr string) (*Filter, error) {
	env, err := filterEnv()
	if err != nil {
		return nil, fmt.Errorf("shape: CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		fe := &FilterError{Expr: expr}
		for _, e := range iss.Errors() {
			line, col := e.Location.Line(), e.Location.Column()+1
			if line <= 0 {
				line, col = 0, 0
			}
			fe.Issues = append(fe.Issues, Issue{Line: line, Column: col, Reason: e.Message})
		}
		return nil, fe
	}
	// object and oldObject are dyn, so a bare field such as
	// object.metadata.name type-checks as dyn. Accepting dyn would let a
	// filter that can never be a bool load and then fail on every event;
	// a field that really is a bool is easy to compare instead.
	switch t := ast.OutputType(); {
	case t.IsExactType(cel.BoolType):
	case t.IsExactType(cel.DynType):
		return nil, &FilterError{Expr: expr, Issues: []Issue{{Line: 1, Column: 1,
			Reason: "the expression yields dyn (a value whose type is only known at run time); a filter must yield bool: compare it, e.g. object.spec.paused == true"}}}
	default:
		return nil, &FilterError{Expr: expr, Issues: []Issue{{Line: 1, Column: 1,
			Reason: fmt.Sprintf("the expression yields %s; a filter must yield bool", t)}}}
	}
	prg, err := env.Program(ast, cel.CostLimit(FilterCostLimit))
	if err != nil {
		return nil, &FilterError{Expr: expr, Issues: []Issue{{Reason: err.Error()}}}
	}
	return &Filter{src: expr, prg: prg}, nil
}

// String is the expression's source.
func (f *Filter) String() string { return f.src }

// ErrNotBool is returned when an evaluation yields a non-bool. CompileFilter
// accepts only expressions typed bool, so this is a safety net.
var ErrNotBool = errors.New("filter did not yield a bool")

// activation hands the three variables to the interpreter without building
// a map per evaluation.
type activation struct {
	typ      string
	obj, old any
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "object":
		return a.obj, true
	case "oldObject":
		return a.old, true
	case "type":
		return a.typ, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// Match evaluates the filter. obj and old are decoded JSON objects; old is
// nil except for updates. kubewire's private key is hidden from the
// expression. A runtime error (a missing key, the cost limit) is returned
// with match true: the caller keeps the event.
func (f *Filter) Match(typ string, obj, old map[string]any) (bool, error) {
	a := &activation{typ: typ, obj: Public(obj)}
	if old != nil {
		a.old = Public(old)
	}
	out, _, err := f.prg.Eval(a)
	if err != nil {
		return true, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, fmt.Errorf("%w: got %s", ErrNotBool, out.Type())
	}
	return b, nil
}
