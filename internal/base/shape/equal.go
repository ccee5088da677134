package shape

import "reflect"

// equalExcept reports whether a and b, decoded JSON values, are equal once
// everything under the paths in ign is disregarded. A list that gained or
// lost elements differs even if every element's fields are ignored: the
// number of conditions, say, is content.
func equalExcept(a, b any, ign *trie) bool {
	if ign == nil {
		return jsonEqual(a, b)
	}
	if ign.ignore {
		return true
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range av {
			c := ign.child(k)
			if c != nil && c.ignore {
				continue
			}
			y, ok := bv[k]
			if !ok {
				if !onlyIgnored(x, c) {
					return false
				}
				continue
			}
			if !equalExcept(x, y, c) {
				return false
			}
		}
		for k, y := range bv {
			if _, ok := av[k]; !ok && !onlyIgnored(y, ign.child(k)) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		e := ign.elem()
		for i := range av {
			if !equalExcept(av[i], bv[i], e) {
				return false
			}
		}
		return true
	default:
		return jsonEqual(a, b)
	}
}

// jsonEqual is reflect.DeepEqual for the types JSON decodes to, without
// reflection on the common paths: it runs on every update.
func jsonEqual(a, b any) bool {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !jsonEqual(x, y) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !jsonEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case int64:
		bv, ok := b.(int64)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case float64:
		bv, ok := b.(float64)
		return ok && av == bv
	case nil:
		return b == nil
	default:
		return reflect.DeepEqual(a, b)
	}
}

// onlyIgnored reports whether v, present on one side only, holds nothing
// but ignored paths: the first heartbeat annotation adds an annotations map
// that holds only the heartbeat, and that is no change worth sending.
func onlyIgnored(v any, ign *trie) bool {
	if ign == nil {
		return false
	}
	if ign.ignore {
		return true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k, x := range m {
		if !onlyIgnored(x, ign.child(k)) {
			return false
		}
	}
	return true
}
