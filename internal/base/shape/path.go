// Package shape holds the per-resource shaping steps that sit between the
// informer and the sinks: redaction and provenance (in the informer's
// transform, before objects are cached), CEL filters, update suppression,
// payload modes and the involved-object key. It depends on nothing else in
// kubewire, so the config package can use it to validate and the informer
// and encoding packages to run it.
package shape

import (
	"fmt"
	"strings"
)

// Path addresses fields of an object. Its syntax (docs/configuration.md):
//
//	status.conditions[*].lastHeartbeatTime
//	metadata.annotations['example.com/x']
//	data["password"]
//
// A path is a field name followed by any number of ".name", "['key']" (or
// "[\"key\"]") and "[*]" steps. Names are letters, digits, '_', '-' and '$';
// anything else (dots and slashes in label keys, say) needs the quoted form.
// "[*]" means every element of a list or every value of a map. There are no
// list indexes: positions in Kubernetes lists are not stable identities.
type Path []Step

// Step is one step of a Path: a map key, or every element (Any).
type Step struct {
	Key string
	Any bool
}

// String prints p in the canonical syntax.
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.Any:
			b.WriteString("[*]")
		case isName(s.Key):
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Key)
		case !strings.Contains(s.Key, "'"):
			b.WriteString("['" + s.Key + "']")
		default:
			b.WriteString(`["` + s.Key + `"]`)
		}
	}
	return b.String()
}

// PathError says where a path is malformed. Pos is the 0-based byte offset.
type PathError struct {
	Pos    int
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("at offset %d: %s", e.Pos, e.Reason)
}

// ParsePath reads a Path. Errors are *PathError.
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, &PathError{0, "a path cannot be empty"}
	}
	var p Path
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '.':
			if i == 0 {
				return nil, &PathError{i, "a path starts with a field name, not '.'"}
			}
			j := nameEnd(s, i+1)
			if j == i+1 {
				return nil, &PathError{i + 1, "expected a field name after '.'"}
			}
			p = append(p, Step{Key: s[i+1 : j]})
			i = j
		case c == '[':
			if strings.HasPrefix(s[i:], "[*]") {
				p = append(p, Step{Any: true})
				i += 3
				continue
			}
			if i+1 >= len(s) || (s[i+1] != '\'' && s[i+1] != '"') {
				return nil, &PathError{i, `expected [*], ['key'] or ["key"]`}
			}
			q := s[i+1]
			end := strings.IndexByte(s[i+2:], q)
			if end < 0 {
				return nil, &PathError{i + 1, "unterminated quoted key"}
			}
			key := s[i+2 : i+2+end]
			if key == "" {
				return nil, &PathError{i + 1, "a quoted key cannot be empty"}
			}
			i += 2 + end + 1
			if i >= len(s) || s[i] != ']' {
				return nil, &PathError{i, "expected ']' after the quoted key"}
			}
			p = append(p, Step{Key: key})
			i++
		case i == 0 && isNameByte(c):
			j := nameEnd(s, 0)
			p = append(p, Step{Key: s[:j]})
			i = j
		default:
			return nil, &PathError{i, fmt.Sprintf("unexpected %q", c)}
		}
	}
	return p, nil
}

func nameEnd(s string, i int) int {
	for i < len(s) && isNameByte(s[i]) {
		i++
	}
	return i
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$'
}

func isName(s string) bool {
	return s != "" && nameEnd(s, 0) == len(s)
}

// MustParsePath is ParsePath for paths written in code.
func MustParsePath(s string) Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(fmt.Sprintf("shape: bad path %q: %v", s, err))
	}
	return p
}

// trie is a set of paths, shaped like the objects it is matched against.
// A node with ignore set covers its whole subtree.
type trie struct {
	ignore   bool
	children map[string]*trie
	any      *trie
}

func newTrie(paths []Path) *trie {
	if len(paths) == 0 {
		return nil
	}
	t := &trie{}
	for _, p := range paths {
		n := t
		for _, s := range p {
			if s.Any {
				if n.any == nil {
					n.any = &trie{}
				}
				n = n.any
				continue
			}
			if n.children == nil {
				n.children = map[string]*trie{}
			}
			c := n.children[s.Key]
			if c == nil {
				c = &trie{}
				n.children[s.Key] = c
			}
			n = c
		}
		n.ignore = true
	}
	t.normalize()
	return t
}

// normalize folds every "[*]" subtree into its named siblings, so that a
// lookup needs one step: the named child if there is one, else the wildcard.
func (t *trie) normalize() {
	if t == nil {
		return
	}
	if t.any != nil {
		for _, c := range t.children {
			c.union(t.any)
		}
		t.any.normalize()
	}
	for _, c := range t.children {
		c.normalize()
	}
}

func (t *trie) union(o *trie) {
	t.ignore = t.ignore || o.ignore
	for k, oc := range o.children {
		if t.children == nil {
			t.children = map[string]*trie{}
		}
		c := t.children[k]
		if c == nil {
			c = &trie{}
			t.children[k] = c
		}
		c.union(oc)
	}
	if o.any != nil {
		if t.any == nil {
			t.any = &trie{}
		}
		t.any.union(o.any)
	}
}

// child returns the node for map key k, or nil when nothing below k is in
// the set.
func (t *trie) child(k string) *trie {
	if t == nil {
		return nil
	}
	if c, ok := t.children[k]; ok {
		return c
	}
	return t.any
}

func (t *trie) elem() *trie {
	if t == nil {
		return nil
	}
	return t.any
}
