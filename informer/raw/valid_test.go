package raw

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// valid reports whether s is one JSON value with optional whitespace
// around it.
func valid(s string) bool {
	i, ok := validValue(s, skipSpace(s, 0))
	return ok && skipSpace(s, i) == len(s)
}

// encoding/json is the oracle: valid must accept exactly what json.Valid
// accepts.
var validCases = []string{
	``, ` `, `{}`, ` { } `, `[]`, `[ ]`, `{"a":1}`, `{"a" : 1 , "b":[1,2,{}]}`,
	`"x"`, `1`, `-0`, `-`, `01`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `1.5e10`, `-1.0e-0`, `+1`,
	`.5`, `0x1`, `true`, `tru`, `false`, `null`, `nul`, `nulll`, `{"a":tru}`, `{"a":true}`,
	`{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a":1 "b":2}`, `[1 2]`, `{1:2}`,
	`"\u00e9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, `"\/"`, `"\b\f\n\r\t\"\\"`, `"a\"`, `"\\"`,
	"\"tab\there\"", "\"nl\nhere\"", "\"del\x7f\"", "\"bad utf-8 \xff\xfe\"", `"héllo wörld"`,
	`{"a":1}}`, `{"a":1}{`, `[[[[]]]]`, `[[[[]]]`, `{"k":"a long value with no specials at all, eight bytes at a time"}`,
	`{"k":"0123456789abcdef0123\"89"}`, `{"k":"0123456789abcdef01234567\\"}`, `{"k":"0123456789abcdef0123456789abcdef"`,
	"{\"k\":\"0123456789abcdef01234567\x1f\"}", "{\"k\":\"0123456789abcdef0123456\x01\"}",
}

func TestValidAcceptsWhatEncodingJSONAccepts(t *testing.T) {
	for _, c := range validCases {
		if got, want := valid(c), json.Valid([]byte(c)); got != want {
			t.Errorf("valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// Every byte value at every position of a word, after plain bytes and
// before any bytes at all: the word-at-a-time skip must stop at exactly the
// first byte a string cannot hold as it is.
func TestSpecial8FindsTheFirstByteThatNeedsALook(t *testing.T) {
	first := func(w []byte) int {
		for i, c := range w {
			if special[c] {
				return i
			}
		}
		return 8
	}
	for pos := range 8 {
		for c := range 256 {
			for _, after := range []byte{'a', 0, '"', '\\', 0x1f, 0x20, 0x80, 0xff} {
				w := []byte("abcdefgh")
				w[pos] = byte(c)
				for k := pos + 1; k < 8; k++ {
					w[k] = after
				}
				got := 8
				if m := special8(binary.LittleEndian.Uint64(w)); m != 0 {
					got = bits.TrailingZeros64(m) >> 3
				}
				if want := first(w); got != want {
					t.Errorf("%q: stops at %d, want %d", w, got, want)
				}
			}
		}
	}
}

func TestValidOnTheCorpusAndItsCuts(t *testing.T) {
	for _, b := range seeds() {
		s := string(b)
		for _, cut := range []int{len(s), 0, len(s) / 2, len(s) - 1} {
			if got, want := valid(s[:cut]), json.Valid(b[:cut]); got != want {
				t.Errorf("%.30s… cut at %d: valid says %v, encoding/json %v", s, cut, got, want)
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"metadata":{"name":"a","annotations":{"k":"` + strings.Repeat("v", 40) + `"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := valid(string(b)), json.Valid(b); got != want {
			t.Fatalf("valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	for _, k := range benchdata.Kinds {
		in := string(k.JSON(benchdata.DefaultSeed, 1, 5))
		b.Run(k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if !valid(in) {
					b.Fatal("not valid")
				}
			}
		})
		b.Run(k.Name+"/gjson", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if !gjson.Valid(in) {
					b.Fatal("not valid")
				}
			}
		})
	}
}
