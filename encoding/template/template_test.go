package template_test

import (
	"errors"
	"testing"

	"github.com/kubewire/kubewire/encoding/template"
)

func TestTemplatesExpandEachPlaceholderToItsValueAndKeepTheLiteralText(t *testing.T) {
	rules := template.Rules{Placeholders: []string{"a", "b"}}
	cases := []struct {
		name, tmpl, want string
		placeholders     int
	}{
		{"An empty template expands to nothing.", "", "", 0},
		{"A template without placeholders is its own expansion.", "fixed.text", "fixed.text", 0},
		{"Placeholders expand in place, literal text around them stays.", "x{a}y.{b}z", "x1y.2z", 2},
		{"A placeholder may be used twice.", "{b}{b}", "22", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := template.Parse(c.tmpl, rules)
			if err != nil {
				t.Fatal(err)
			}
			if got := tm.Expand([]string{"1", "2"}); got != c.want {
				t.Errorf("Expand = %q, want %q", got, c.want)
			}
			if got := tm.Placeholders(); got != c.placeholders {
				t.Errorf("Placeholders = %d, want %d", got, c.placeholders)
			}
		})
	}
}

func TestTheFirstProblemFromTheLeftIsTheOneReported(t *testing.T) {
	rules := template.Rules{Placeholders: []string{"a"}, MaxPlaceholders: 1, Literal: func(r rune) string {
		if r == '/' {
			return "has a slash"
		}
		return ""
	}}
	cases := []struct {
		name, tmpl, want string
		tooMany          bool
	}{
		{"A refused literal before a brace problem is reported first.", "x/{a", "has a slash", false},
		{"An unclosed brace before a refused literal is reported first.", "x{a/", `has a "{" without a matching "}"`, false},
		{"A closing brace without an opening one is reported.", "x}", `has a "}" without a matching "{"`, false},
		{"An unknown placeholder names the known ones.", "{b}", "has the unknown placeholder {b}; known placeholders: {a}", false},
		{"One placeholder more than allowed is marked as too many.", "{a}{a}/", "holds more than 1 placeholders", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := template.Parse(c.tmpl, rules)
			var te *template.Error
			if !errors.As(err, &te) {
				t.Fatalf("Parse(%q) = %v, want a *template.Error", c.tmpl, err)
			}
			if te.Why != c.want || te.TooMany != c.tooMany {
				t.Errorf("Parse(%q) = %q (too many %v), want %q (too many %v)", c.tmpl, te.Why, te.TooMany, c.want, c.tooMany)
			}
		})
	}
}
