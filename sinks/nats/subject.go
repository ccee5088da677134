package nats

import (
	"fmt"
	"strings"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/encoding/template"
)

// Fixed tokens stand where an object has no value. They start with "_",
// which no escaped value does (see EscapeToken), so they never collide with a
// real namespace or name.
const (
	// TokenClusterScoped is the {namespace} token of a cluster-scoped object.
	TokenClusterScoped = "_cluster"
	// TokenSnapshot is the {namespace} and {name} token of snapshot markers
	// and gaps, which describe a whole resource rather than one object (a
	// gap of one namespace's watch too: it goes where the snapshot that
	// repairs it goes).
	TokenSnapshot = "_snapshot"
	// TokenCoreGroup is the {group} token of the core ("") API group. A
	// real group called "core" is escaped to "~63ore" so it cannot meet it.
	TokenCoreGroup = "core"
	// tokenEmpty stands for any other empty value; escaped values are never
	// empty, so it too is distinct.
	tokenEmpty = "_empty"
)

// EscapeToken turns any string into one valid, wildcard-free NATS subject
// token, injectively:
//
//   - ASCII letters, digits and "-" are kept;
//   - "." becomes "_" (Kubernetes names and groups are dotted; a name never
//     contains "_", so the common case stays readable);
//   - every other byte, "_" and "~" included, becomes "~" and two upper-case
//     hex digits, which also covers space, "*", ">", ":" and non-ASCII UTF-8;
//   - a leading "." becomes "~2E", so an escaped token never starts with "_"
//     and never meets the fixed tokens above.
//
// Decoding is unambiguous ("_" is ".", "~XY" is one byte, anything else is
// itself), so two different values never share a token. The empty string is
// the caller's to map to a fixed token.
func EscapeToken(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte('_')
		default:
			b.WriteByte('~')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	return b.String()
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

func escapeOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return EscapeToken(s)
}

// escapeGroup maps the core group to "core" and keeps a real group of that
// name apart from it.
func escapeGroup(g string) string {
	switch g {
	case "":
		return TokenCoreGroup
	case TokenCoreGroup:
		return "~63ore"
	}
	return EscapeToken(g)
}

// The placeholders of a subject template, as indexes into subjectValues and
// into placeholderNames.
const (
	phCluster = iota
	phGroup
	phVersion
	phResource
	phKind
	phNamespace
	phName
	numPlaceholders
)

// placeholderNames names the placeholders in the order of their indexes.
// They are those of SubjectPlaceholders: a template that config
// validation accepts parses with them.
var placeholderNames = [numPlaceholders]string{
	phCluster: "cluster", phGroup: "group", phVersion: "version", phResource: "resource",
	phKind: "kind", phNamespace: "namespace", phName: "name",
}

// Template expands a validated subject template for an event.
type Template struct {
	t *template.Template
}

// CompileTemplate parses a subject template; it rejects what config
// validation rejects.
func CompileTemplate(tmpl string) (*Template, error) {
	if errs := ValidateSubjectTemplate(nil, tmpl); len(errs) > 0 {
		return nil, fmt.Errorf("subject template: %w", errs.ToAggregate())
	}
	// Validation parsed it token by token; as a whole it is the same
	// literal text and placeholders, and no placeholder name holds a ".".
	t, err := template.Parse(tmpl, template.Rules{Placeholders: placeholderNames[:]})
	if err != nil {
		return nil, fmt.Errorf("subject template: %w", err)
	}
	return &Template{t: t}, nil
}

// subjectValues are the escaped tokens of one event.
type subjectValues [numPlaceholders]string

// Subject returns the subject of ev. It fails only for an event that does not
// follow kubewire's event contract (a source it cannot parse).
func (t *Template) Subject(ev *encoding.Event) (string, error) {
	v, err := valuesOf(ev)
	if err != nil {
		return "", err
	}
	return t.t.Expand(v[:]), nil
}

// valuesOf reads the subject values from the event contract, each escaped
// into one token: group, version and resource from the source, the rest from
// extensions.
func valuesOf(ev *encoding.Event) (subjectValues, error) {
	var v subjectValues
	src, ok := encoding.ParseSource(ev.Source())
	if !ok {
		return v, fmt.Errorf("event %s: source %q is not a kubewire resource source", ev.ID(), ev.Source())
	}
	ext := func(name string) string { return ev.Extension(name) }
	cluster := ext(encoding.ExtCluster)
	if cluster == "" {
		cluster = src.Cluster
	}
	v[phCluster] = escapeOr(cluster, tokenEmpty)
	v[phGroup] = escapeGroup(src.Group)
	v[phVersion] = escapeOr(src.Version, tokenEmpty)
	v[phResource] = escapeOr(src.Resource, tokenEmpty)
	v[phKind] = escapeOr(ext(encoding.ExtKind), tokenEmpty)
	name := ext(encoding.ExtName)
	switch {
	case name == "":
		// Only markers (snapshot markers, gaps) have no object.
		v[phNamespace], v[phName] = TokenSnapshot, TokenSnapshot
	default:
		v[phNamespace] = escapeOr(ext(encoding.ExtNamespace), TokenClusterScoped)
		v[phName] = EscapeToken(name)
	}
	return v, nil
}

// ResourceSubject is the subject filter that captures every subject the
// template produces for one resource, its snapshot markers and gaps
// included: the cluster, group, version and resource placeholders
// expanded as Subject does, every other placeholder token "*". A template
// without some of those placeholders captures other resources too: a
// reader still tells events apart by their partitionkey.
func ResourceSubject(template, cluster, group, version, resource string) string {
	r := strings.NewReplacer("{cluster}", escapeOr(cluster, tokenEmpty), "{group}", escapeGroup(group),
		"{version}", escapeOr(version, tokenEmpty), "{resource}", escapeOr(resource, tokenEmpty))
	toks := strings.Split(template, ".")
	for i, t := range toks {
		if toks[i] = r.Replace(t); strings.Contains(toks[i], "{") {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}
