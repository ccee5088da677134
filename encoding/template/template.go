// Package template parses and expands the templates that name where an event
// goes: the Kafka sink's topic ("k8s.{group}.{resource}") and the NATS sink's
// subject ("kubewire.{resource}.{namespace}.{name}"). Both are literal text
// with placeholders in braces; each sink brings its own rules (which
// placeholders, which literal characters) and its own treatment of the
// values (NATS escapes each one into a subject token; Kafka uses them as
// they are).
//
// It imports nothing of kubewire, so that config validation and the sinks
// can share it.
package template

import (
	"fmt"
	"strings"
)

// Rules are what a template may hold besides literal text and placeholders
// in braces.
type Rules struct {
	// Placeholders are the names a template may write in braces. A parsed
	// template refers to them by their index in this list.
	Placeholders []string
	// Literal, if set, returns why the character r may not appear outside
	// braces, or "".
	Literal func(r rune) string
	// MaxPlaceholders, if above 0, bounds how many placeholders the
	// template holds; one more is an *Error with TooMany set.
	MaxPlaceholders int
}

// Error is why a template does not parse. Its message is the reason alone,
// worded to follow "the template" (`has a "{" without a matching "}"`).
type Error struct {
	Why string
	// TooMany is set when the template holds more than
	// Rules.MaxPlaceholders placeholders; the caller words that error.
	TooMany bool
}

func (e *Error) Error() string { return e.Why }

// Template is a parsed template: literal text, each piece followed by a
// placeholder or by nothing.
type Template struct {
	segments []segment
	// size is the length of the literal text, to size an expansion.
	size int
}

type segment struct {
	literal string
	// placeholder is an index into Rules.Placeholders, or -1 for none.
	placeholder int
}

// Parse parses tmpl. It reads from left to right and reports the first
// thing wrong: a literal character Rules.Literal refuses, a "}" without a
// "{", a "{" without a "}", a placeholder not in Rules.Placeholders, or one
// placeholder too many.
func Parse(tmpl string, rules Rules) (*Template, error) {
	t := &Template{}
	rest := tmpl
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if rules.Literal != nil {
			for _, r := range lit {
				if why := rules.Literal(r); why != "" {
					return nil, &Error{Why: why}
				}
			}
		}
		if open < 0 {
			t.add(lit, -1)
			break
		}
		if rest[open] == '}' {
			return nil, &Error{Why: `has a "}" without a matching "{"`}
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, &Error{Why: `has a "{" without a matching "}"`}
		}
		name := rest[open+1 : open+end]
		ph := -1
		for i, k := range rules.Placeholders {
			if k == name {
				ph = i
				break
			}
		}
		if ph < 0 {
			return nil, &Error{Why: fmt.Sprintf("has the unknown placeholder {%s}; known placeholders: {%s}",
				name, strings.Join(rules.Placeholders, "}, {"))}
		}
		if rules.MaxPlaceholders > 0 && t.Placeholders() == rules.MaxPlaceholders {
			return nil, &Error{Why: fmt.Sprintf("holds more than %d placeholders", rules.MaxPlaceholders), TooMany: true}
		}
		t.add(lit, ph)
		rest = rest[open+end+1:]
	}
	return t, nil
}

func (t *Template) add(literal string, placeholder int) {
	t.segments = append(t.segments, segment{literal, placeholder})
	t.size += len(literal)
}

// Placeholders is how many placeholders the template holds.
func (t *Template) Placeholders() int {
	n := 0
	for _, s := range t.segments {
		if s.placeholder >= 0 {
			n++
		}
	}
	return n
}

// Expand returns the template with each placeholder replaced by its value:
// values[i] is the value of Rules.Placeholders[i]. A sink that must change
// values (NATS escapes each into one subject token) passes them changed.
func (t *Template) Expand(values []string) string {
	if len(t.segments) == 1 && t.segments[0].placeholder < 0 {
		return t.segments[0].literal
	}
	n := t.size
	for _, s := range t.segments {
		if s.placeholder >= 0 {
			n += len(values[s.placeholder])
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range t.segments {
		b.WriteString(s.literal)
		if s.placeholder >= 0 {
			b.WriteString(values[s.placeholder])
		}
	}
	return b.String()
}
