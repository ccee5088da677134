package raw

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The validator: JSON by encoding/json's rules (strings are not checked for
// UTF-8, as neither encoding/json nor the apiserver's encoder needs them to
// be). It validates the watch frames' objects in the same pass that reads
// their metadata (see scanFast), instead of a gjson.Valid pass of its own
// before it. Each function checks the value at s[i] and returns the offset
// just after it. Nesting is bounded by the caller: the frame reader refuses
// frames deeper than maxDepth before they get here.

// validValue checks the value at s[i], which is not whitespace.
func validValue(s string, i int) (int, bool) {
	if i >= len(s) {
		return i, false
	}
	switch c := s[i]; c {
	case '{':
		return validObject(s, i)
	case '[':
		return validArray(s, i)
	case '"':
		return validString(s, i)
	case 't':
		return literal(s, i, "true")
	case 'f':
		return literal(s, i, "false")
	case 'n':
		return literal(s, i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return validNumber(s, i)
		}
		return i, false
	}
}

func literal(s string, i int, lit string) (int, bool) {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return i, false
	}
	return i + len(lit), true
}

func validObject(s string, at int) (int, bool) {
	i := skipSpace(s, at+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = validString(s, i); !ok {
			return i, false
		}
		i = skipSpace(s, i)
		if i >= len(s) || s[i] != ':' {
			return i, false
		}
		if i, ok = validValue(s, skipSpace(s, i+1)); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = afterMember(s, i, '}'); !ok || closed {
			return i, ok
		}
	}
}

func validArray(s string, at int) (int, bool) {
	i := skipSpace(s, at+1)
	if i < len(s) && s[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = validValue(s, i); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = afterMember(s, i, ']'); !ok || closed {
			return i, ok
		}
	}
}

// afterMember reads what follows a member or element at s[i]: a comma,
// after which it returns the offset of the next one, or the closing
// bracket, after which it returns the offset past it and closed.
func afterMember(s string, i int, closing byte) (next int, closed, ok bool) {
	i = skipSpace(s, i)
	if i >= len(s) {
		return i, false, false
	}
	switch s[i] {
	case closing:
		return i + 1, true, true
	case ',':
		return skipSpace(s, i+1), false, true
	}
	return i, false, false
}

// special marks the bytes a string cannot hold as they are.
var special = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 marks the special bytes of the eight in x (little-endian) by
// their high bits, and is zero if none is. Each test is the "has a zero
// byte" bit trick; a borrow can only mark bytes above one that really
// matched, so the lowest mark is exact and so is the answer for the word
// as a whole.
func special8(x uint64) uint64 {
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	control := (x - ones*0x20) & ^x
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | control) & highs
}

// validString checks the string whose opening quote is s[at].
func validString(s string, at int) (int, bool) {
	i := at + 1
	for {
		// Eight bytes at a time, jumping straight to the first that needs
		// a look: values such as a ConfigMap's files hold an escape every
		// few dozen bytes, and a byte at a time between them cost twice as
		// much. The last few bytes of s go one at a time.
		for i+8 <= len(s) {
			if m := special8(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i+8 > len(s) {
			for i < len(s) && !special[s[i]] {
				i++
			}
		}
		if i >= len(s) {
			return i, false
		}
		switch c := s[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			i++
			if i >= len(s) {
				return i, false
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(s)-i < 5 {
					return len(s), false
				}
				for k := i + 1; k < i+5; k++ {
					if !isHex(s[k]) {
						return k, false
					}
				}
				i += 5
			default:
				return i, false
			}
		default: // a control character
			return i, false
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at s[i].
func validNumber(s string, i int) (int, bool) {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i+1)
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
