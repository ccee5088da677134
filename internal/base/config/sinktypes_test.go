package config

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// testTypes stands in for the sink registry, which config cannot import: a
// stdout-like type whose block has one optional field, and a type whose
// block is required.
type testTypes struct{}

func (testTypes) Types() []string { return []string{"needy", "stdout"} }

func (testTypes) NewBlock(typ string) (SinkBlock, bool) {
	switch typ {
	case "stdout":
		return &testStdout{}, true
	case "needy":
		return &testNeedy{}, true
	}
	return nil, false
}

type testStdout struct {
	Pretty bool `json:"pretty,omitempty"`
}

func (*testStdout) Default()                                      {}
func (*testStdout) Validate(*field.Path, []Route) field.ErrorList { return nil }

type testNeedy struct {
	Servers []string `json:"servers"`
	Batch   int      `json:"batch,omitempty"`
}

func (n *testNeedy) Default() {
	if n.Batch == 0 {
		n.Batch = 100
	}
}

func (n *testNeedy) Validate(p *field.Path, routes []Route) field.ErrorList {
	var errs field.ErrorList
	if len(n.Servers) == 0 {
		errs = append(errs, field.Required(p.Child("servers"), "at least one server"))
	}
	for _, r := range routes {
		if r.Resource.Resource == "secrets" {
			errs = append(errs, field.Forbidden(r.Path.Child("resource"), "needy sinks take no secrets"))
		}
	}
	return errs
}

func (*testNeedy) BlockRequired() string { return "a needy block with servers" }

func (n *testNeedy) ExplicitZeros(p *field.Path, given func(*field.Path) bool) field.ErrorList {
	if n.Batch == 0 && given(p.Child("batch")) {
		return field.ErrorList{field.Invalid(p.Child("batch"), 0, "omit the field for the default (100)")}
	}
	return nil
}
