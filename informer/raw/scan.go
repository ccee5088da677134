package raw

import (
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// scanned is what New reads from an object's bytes: the identity members
// of its metadata, where managedFields sit and their newest entry, and
// whether it has a kind and an apiVersion. String values are gjson.Results
// whose Index is their offset in the input, so New can point into its copy.
//
// Repeated keys, which the apiserver never writes, resolve as gjson does:
// the first "metadata", "kind" and "apiVersion"; within metadata the last
// of each member.
type scanned struct {
	name, namespace, uid, resourceVersion, generation gjson.Result
	// managedFields is the offset of metadata.managedFields' key, -1 when
	// there is none; managedFieldsEnd the end of its value.
	managedFields, managedFieldsEnd int
	changedBy                       ChangedBy
	hasChangedBy                    bool
	hasKind, hasAPIVersion          bool
}

// scanGJSON reads any valid object, escapes and all, with gjson: one search
// for metadata, one walk over its members and one over managedFields'
// entries. typeMeta says whether kind and apiVersion are wanted.
func scanGJSON(s string, typeMeta bool) scanned {
	sc := scanned{managedFields: -1}
	md := gjson.Get(s, "metadata")
	if md.IsObject() {
		md.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "managedFields":
				sc.changedBy, sc.hasChangedBy = newest(v)
				sc.managedFields, sc.managedFieldsEnd = k.Index, v.Index+len(v.Raw)
			case "name":
				sc.name = v
			case "namespace":
				sc.namespace = v
			case "uid":
				sc.uid = v
			case "resourceVersion":
				sc.resourceVersion = v
			case "generation":
				sc.generation = v
			}
			return true
		})
	}
	if typeMeta {
		sc.hasKind = stringValue(gjson.Get(s, "kind")) != ""
		sc.hasAPIVersion = stringValue(gjson.Get(s, "apiVersion")) != ""
	}
	return sc
}

// newest picks the managedFields entry with the latest time, as
// shape.ChangedByOf does for unstructured objects: entries without a valid
// RFC 3339 time are skipped, and a tie goes to the later entry.
func newest(entries gjson.Result) (ChangedBy, bool) {
	var p picker
	entries.ForEach(func(_, e gjson.Result) bool {
		if !e.IsObject() {
			return true
		}
		var mgr, op, ts string
		var hasTime bool
		e.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "manager":
				mgr = stringValue(v)
			case "operation":
				op = stringValue(v)
			case "time":
				ts, hasTime = stringValue(v), v.Type == gjson.String
			}
			return true
		})
		p.offer(mgr, op, ts, hasTime)
		return true
	})
	return p.best, p.found
}

// picker keeps the newest of the managedFields entries offered in order.
type picker struct {
	best  ChangedBy
	bestT time.Time
	found bool
}

func (p *picker) offer(mgr, op, ts string, hasTime bool) {
	if !hasTime {
		return
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return
	}
	if !p.found || !t.Before(p.bestT) {
		p.best, p.bestT, p.found = ChangedBy{Manager: mgr, Operation: op, Time: ts}, t, true
	}
}

func stringValue(v gjson.Result) string {
	if v.Type != gjson.String {
		return ""
	}
	return v.Str
}

// scanFast reads what scanGJSON reads in a single pass over the object,
// skipping every value it does not need at the speed of a bracket count
// (strings at IndexByte's). gjson finds metadata's end before walking it
// and walks managedFields once more for their newest entry, which for an
// object with managedFields is most of its bytes three times over. With
// validate, the pass also checks that s is valid JSON, the values it skips
// included, at about the cost of a validation alone.
//
// It handles objects as the apiserver writes them. ok is false for the
// rest, which scanGJSON then reads: an escape in a key or value it reads,
// managedFields that are an object, or (whether validating or not) bytes
// that are not a valid object.
func scanFast(s string, validate bool) (sc scanned, ok bool) {
	w := walker{s: s, validate: validate}
	sc.managedFields = -1
	seenMetadata := false
	seenKind, seenAPIVersion := false, false
	i, ok := w.object(skipSpace(s, 0), func(key string, _, at int) (int, bool) {
		switch {
		case key == "metadata" && !seenMetadata:
			seenMetadata = true
			if s[at] == '{' {
				return w.metadata(&sc, at)
			}
		case key == "kind" && !seenKind:
			seenKind = true
			v, end, ok := w.str(at)
			sc.hasKind = v.Str != ""
			return end, ok
		case key == "apiVersion" && !seenAPIVersion:
			seenAPIVersion = true
			v, end, ok := w.str(at)
			sc.hasAPIVersion = v.Str != ""
			return end, ok
		}
		return w.skip(at)
	})
	return sc, ok && skipSpace(s, i) == len(s)
}

// walker walks the members scanFast reads and skips the rest, checking
// what it skips when validate is set.
type walker struct {
	s        string
	validate bool
}

// metadata walks the metadata object at s[at].
func (w walker) metadata(sc *scanned, at int) (int, bool) {
	s := w.s
	return w.object(at, func(key string, keyAt, at int) (int, bool) {
		var dst *gjson.Result
		switch key {
		case "name":
			dst = &sc.name
		case "namespace":
			dst = &sc.namespace
		case "uid":
			dst = &sc.uid
		case "resourceVersion":
			dst = &sc.resourceVersion
		case "generation":
			end, ok := w.skip(at)
			if ok {
				if c := s[at]; c == '-' || c >= '0' && c <= '9' {
					sc.generation = gjson.Parse(s[at:end])
				} else {
					sc.generation = gjson.Result{}
				}
			}
			return end, ok
		case "managedFields":
			var end int
			var ok bool
			sc.changedBy, sc.hasChangedBy = ChangedBy{}, false
			switch s[at] {
			case '[':
				end, ok = w.entries(sc, at)
			case '{':
				return at, false // gjson would walk its members as entries
			default:
				end, ok = w.skip(at)
			}
			sc.managedFields, sc.managedFieldsEnd = keyAt, end
			return end, ok
		default:
			return w.skip(at)
		}
		v, end, ok := w.str(at)
		*dst = v
		return end, ok
	})
}

// entries walks the managedFields array at s[at], offering each entry to
// a picker.
func (w walker) entries(sc *scanned, at int) (int, bool) {
	var p picker
	end, ok := w.array(at, func(at int) (int, bool) {
		if w.s[at] != '{' {
			return w.skip(at)
		}
		var mgr, op, ts string
		var hasTime bool
		end, ok := w.object(at, func(key string, _, at int) (int, bool) {
			var dst *string
			switch key {
			case "manager":
				dst = &mgr
			case "operation":
				dst = &op
			case "time":
				dst = &ts
			default:
				return w.skip(at)
			}
			v, end, ok := w.str(at)
			*dst = v.Str
			if key == "time" {
				hasTime = v.Type == gjson.String
			}
			return end, ok
		})
		p.offer(mgr, op, ts, hasTime)
		return end, ok
	})
	sc.changedBy, sc.hasChangedBy = p.best, p.found
	return end, ok
}

// object calls member for each member of the object at s[at] (its opening
// brace) with the key, the offset of the key's quote and the offset of
// the value, whose end member returns. A key with an escape cannot be
// compared as it is: ok is false.
func (w walker) object(at int, member func(key string, keyAt, at int) (int, bool)) (int, bool) {
	s := w.s
	if at >= len(s) || s[at] != '{' {
		return at, false
	}
	i := skipSpace(s, at+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return i, false
		}
		keyAt := i
		v, end, ok := w.str(i)
		if !ok {
			return end, false
		}
		i = skipSpace(s, end)
		if i >= len(s) || s[i] != ':' {
			return i, false
		}
		i = skipSpace(s, i+1)
		if i >= len(s) {
			return i, false
		}
		if i, ok = member(v.Str, keyAt, i); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = afterMember(s, i, '}'); !ok || closed {
			return i, ok
		}
	}
}

// array calls elem for each element of the array at s[at].
func (w walker) array(at int, elem func(at int) (int, bool)) (int, bool) {
	s := w.s
	i := skipSpace(s, at+1)
	if i < len(s) && s[i] == ']' {
		return i + 1, true
	}
	for {
		if i >= len(s) {
			return i, false
		}
		var ok bool
		if i, ok = elem(i); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = afterMember(s, i, ']'); !ok || closed {
			return i, ok
		}
	}
}

// str reads the value at s[at] as gjson would a member New reads: a string
// without escapes as a String result indexed at its quote; any other value
// as an empty result, skipped. A string with an escape gives ok false.
func (w walker) str(at int) (gjson.Result, int, bool) {
	s := w.s
	if s[at] != '"' {
		end, ok := w.skip(at)
		return gjson.Result{}, end, ok
	}
	var end int
	if w.validate {
		var ok bool
		if end, ok = validString(s, at); !ok {
			return gjson.Result{}, end, false
		}
	} else {
		q := strings.IndexByte(s[at+1:], '"')
		if q < 0 {
			return gjson.Result{}, at, false
		}
		end = at + q + 2
	}
	if strings.IndexByte(s[at+1:end-1], '\\') >= 0 {
		return gjson.Result{}, at, false
	}
	return gjson.Result{Type: gjson.String, Raw: s[at:end], Str: s[at+1 : end-1], Index: at}, end, true
}

// skip returns the end of the value at s[at]: checked, when validating;
// otherwise trusted to be valid, strings and nested values found by their
// closing quote and bracket, anything else by the first byte that cannot
// be part of a number or literal.
func (w walker) skip(at int) (int, bool) {
	if w.validate {
		return validValue(w.s, at)
	}
	s := w.s
	switch s[at] {
	case '"':
		return skipString(s, at+1)
	case '{', '[':
		depth := 0
		for i := at; i < len(s); {
			switch s[i] {
			case '"':
				var ok bool
				if i, ok = skipString(s, i+1); !ok {
					return i, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return len(s), false
	default:
		i := at
		for i < len(s) && !isDelimiter(s[i]) {
			i++
		}
		return i, i > at
	}
}

// skipString returns the end of the string whose content starts at s[i]:
// after the first quote not escaped, that is not preceded by an odd number
// of backslashes.
func skipString(s string, i int) (int, bool) {
	for {
		q := strings.IndexByte(s[i:], '"')
		if q < 0 {
			return len(s), false
		}
		i += q
		n := 0
		for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i, true
		}
	}
}

func isDelimiter(c byte) bool { return c == ',' || c == '}' || c == ']' || isSpace(c) }
