package raw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// refDecoder is the watch decoder that WatchDecoder replaced, written with
// encoding/json alone: the oracle of the fuzz test. It frames the stream
// with encoding/json's Decoder and reads the envelope as encoding/json
// reads it (exact key match, the last of repeated keys wins).
type refDecoder struct {
	dec *json.Decoder
	opt BuildOptions
}

func (r *refDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var frame json.RawMessage
	if err := r.dec.Decode(&frame); err != nil {
		return "", nil, err
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(frame, &env); err != nil {
		return "", nil, err
	}
	var typ string
	if t, ok := env["type"]; ok {
		if err := json.Unmarshal(t, &typ); err != nil {
			return "", nil, err
		}
	}
	obj := env["object"]
	switch t := watch.EventType(typ); t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		if len(obj) == 0 || obj[0] != '{' {
			return "", nil, errors.New("no object")
		}
		o, err := New(obj, r.opt)
		return t, o, err
	case watch.Error:
		st := &metav1.Status{}
		if err := json.Unmarshal(obj, st); err != nil {
			return "", nil, err
		}
		return t, st, nil
	default:
		return "", nil, fmt.Errorf("unknown type %q", typ)
	}
}

// result is one Decode's outcome in a comparable form.
type result struct {
	typ watch.EventType
	obj string // the Object's JSON, or the Status
	err error
}

func (r result) String() string {
	if r.err != nil {
		return fmt.Sprintf("error %v", r.err)
	}
	return fmt.Sprintf("%s %.80s", r.typ, r.obj)
}

// decodeAll decodes until the first error, which it includes.
func decodeAll(t testing.TB, d interface {
	Decode() (watch.EventType, runtime.Object, error)
}) []result {
	var out []result
	for {
		typ, obj, err := d.Decode()
		if err != nil {
			return append(out, result{err: err})
		}
		r := result{typ: typ}
		switch o := obj.(type) {
		case *Object:
			r.obj = string(o.JSON)
		case *metav1.Status:
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			r.obj = "status " + string(b)
		default:
			t.Fatalf("Decode returned %T", obj)
		}
		out = append(out, r)
	}
}

// chunkReader returns at most n bytes per Read, so frames straddle reads.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func newDecoder(stream []byte, chunk int) *WatchDecoder {
	return NewWatchDecoder(io.NopCloser(&chunkReader{b: stream, n: chunk}), BuildOptions{})
}

func watchFrame(typ string, obj []byte) []byte {
	return append(append([]byte(`{"type":"`+typ+`","object":`), obj...), '}')
}

// tricky objects have strings that a bracket counter must not miscount.
var tricky = [][]byte{
	[]byte(`{"metadata":{"name":"a}b{c]d[","annotations":{"q":"\"}","bs":"\\","bsq":"\\\"}\\\\","u":"\u007d"}},"spec":[{},[],""]}`),
	[]byte(`{"metadata":{"name":"\\\\"},"data":{"{":"}","[":"]"}}`),
}

// watchStream is a stream of frames of every benchdata kind (the widget is
// larger than the reader's first buffer), the corpus and the tricky
// objects, with the events WatchDecoder must return for it.
func watchStream(t testing.TB) ([]byte, []result) {
	var stream []byte
	var want []result
	add := func(typ watch.EventType, obj []byte, sep string) {
		// The object of an event is its value without the whitespace
		// around it.
		o, err := New(bytes.TrimSpace(obj), BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stream = append(append(stream, watchFrame(string(typ), obj)...), sep...)
		want = append(want, result{typ: typ, obj: string(o.JSON)})
	}
	for i, k := range benchdata.Kinds {
		for j := range 8 {
			add(watch.Modified, k.JSON(benchdata.DefaultSeed, j, int64(10+i)), "\n")
		}
	}
	for _, s := range append(seeds(), tricky...) {
		add(watch.Added, s, "\n")
	}
	add(watch.Deleted, tricky[0], "")
	add(watch.Bookmark, []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"6"}}`), " \r\n\t ")
	return stream, want
}

func TestWatchDecoderReadsFramesSplitAcrossReads(t *testing.T) {
	stream, want := watchStream(t)
	want = append(want, result{err: io.EOF})
	for _, n := range []int{1, 2, 3, 7, 100, 4093, minRead - 1, minRead, minRead + 1, 3 * minRead, len(stream)} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			got := decodeAll(t, newDecoder(stream, n))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("reading %d bytes at a time:\n%s", n, diffResults(got, want))
			}
		})
	}
	t.Run("data-with-EOF", func(t *testing.T) {
		// The last Read returns the last bytes and io.EOF together.
		d := NewWatchDecoder(io.NopCloser(iotest.DataErrReader(bytes.NewReader(stream))), BuildOptions{})
		if got := decodeAll(t, d); !reflect.DeepEqual(got, want) {
			t.Fatal(diffResults(got, want))
		}
	})
}

func diffResults(got, want []result) string {
	var b strings.Builder
	for i := range max(len(got), len(want)) {
		var g, w result
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "event %d:\n got %v\nwant %v\n", i, g, w)
		}
	}
	return b.String()
}

func TestWatchDecoderSkipsWhitespaceBetweenFrames(t *testing.T) {
	a := watchFrame("ADDED", []byte(`{"metadata":{"name":"a"}}`))
	b := watchFrame("DELETED", []byte(`{"metadata":{"name":"b"}}`))
	for name, stream := range map[string]string{
		"newline":    string(a) + "\n" + string(b) + "\n",
		"none":       string(a) + string(b),
		"all kinds":  " \t\r\n" + string(a) + "\r\n \t" + string(b) + "\n\n  ",
		"many lines": strings.Repeat("\n", 3*minRead) + string(a) + strings.Repeat(" ", minRead+5) + string(b),
	} {
		t.Run(name, func(t *testing.T) {
			got := decodeAll(t, newDecoder([]byte(stream), 1000))
			if len(got) != 3 || got[0].typ != watch.Added || got[1].typ != watch.Deleted || got[2].err != io.EOF {
				t.Fatalf("got %v", got)
			}
		})
	}
	for _, stream := range []string{"", " ", "\n\r\t "} {
		if got := decodeAll(t, newDecoder([]byte(stream), 1)); len(got) != 1 || got[0].err != io.EOF {
			t.Errorf("stream %q: got %v, want io.EOF", stream, got)
		}
	}
}

func TestWatchDecoderReportsTruncatedFrames(t *testing.T) {
	first := watchFrame("ADDED", tricky[0])
	stream := append(append(append([]byte{}, first...), '\n'), watchFrame("MODIFIED", tricky[1])...)
	for cut := range len(stream) {
		got := decodeAll(t, newDecoder(stream[:cut], 5))
		complete := 0
		if cut >= len(first) {
			complete = 1
		}
		wantErr := io.ErrUnexpectedEOF
		if len(bytes.TrimSpace(stream[:cut])) == len(first)*complete {
			wantErr = io.EOF // cut between frames
		}
		if len(got) != complete+1 || got[complete].err != wantErr {
			t.Fatalf("stream cut at %d of %d: got %v, want %d events then %v", cut, len(stream), got, complete, wantErr)
		}
	}
	// A truncated frame larger than the reader's first buffer.
	big := watchFrame("MODIFIED", benchdata.Widgets.JSON(benchdata.DefaultSeed, 0, 1))
	if got := decodeAll(t, newDecoder(big[:len(big)-1], minRead/3)); len(got) != 1 || got[0].err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated widget: got %v", got)
	}
}

func TestWatchDecoderRejectsMalformedFrames(t *testing.T) {
	good := string(watchFrame("ADDED", []byte(`{"metadata":{"name":"a"}}`))) + "\n"
	for name, bad := range map[string]string{
		"invalid literal":         `{"type":"ADDED","object":{"a":tru}}`,
		"invalid number":          `{"type":"ADDED","object":{"a":01}}`,
		"mismatched brackets":     `{"type":"ADDED","object":{"a":[}]}`,
		"missing colon":           `{"type":"ADDED","object":{"a" 1}}`,
		"trailing comma":          `{"type":"ADDED","object":{"a":1,}}`,
		"control character":       "{\"type\":\"ADDED\",\"object\":{\"a\":\"x\ty\"}}",
		"bad escape":              `{"type":"ADDED","object":{"a":"\x"}}`,
		"garbage between frames":  `x` + good,
		"array frame":             `[]`,
		"string frame":            `"ADDED"`,
		"unknown type":            `{"type":"CHANGED","object":{}}`,
		"type not a string":       `{"type":1,"object":{}}`,
		"no object":               `{"type":"ADDED"}`,
		"object not an object":    `{"type":"MODIFIED","object":[]}`,
		"error without a status":  `{"type":"ERROR","object":"gone"}`,
		"nested deeper than 10k":  `{"type":"ADDED","object":{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}}`,
		"unterminated then valid": `{"type":"ADDED","object":{"a":"}` + "\n" + good + good,
	} {
		t.Run(name, func(t *testing.T) {
			d := newDecoder([]byte(good+bad+good), 3)
			got := decodeAll(t, d)
			if len(got) != 2 || got[0].typ != watch.Added || got[1].err == nil ||
				errors.Is(got[1].err, io.EOF) || (errors.Is(got[1].err, io.ErrUnexpectedEOF) && name != "unterminated then valid") {
				t.Fatalf("got %v, want the good frame and then a decoding error", got)
			}
			// The error is final: no later frame is returned as if the bad
			// one had not been there.
			if _, _, err := d.Decode(); err != got[1].err {
				t.Fatalf("after the error Decode returned %v", err)
			}
		})
	}
	// The deepest nesting encoding/json accepts is accepted.
	deep := `{"type":"ADDED","object":{"a":` + strings.Repeat("[", maxDepth-2) + strings.Repeat("]", maxDepth-2) + `}}`
	if got := decodeAll(t, newDecoder([]byte(deep), minRead)); len(got) != 2 || got[0].typ != watch.Added || got[1].err != io.EOF {
		t.Fatalf("nesting of %d: got %v", maxDepth, got)
	}
}

func TestWatchDecoderReturnsReadErrors(t *testing.T) {
	boom := errors.New("connection reset")
	f := watchFrame("ADDED", []byte(`{"metadata":{"name":"a"}}`))
	stream := append(append([]byte{}, f...), f[:10]...)
	d := NewWatchDecoder(io.NopCloser(io.MultiReader(bytes.NewReader(stream), iotest.ErrReader(boom))), BuildOptions{})
	got := decodeAll(t, d)
	if len(got) != 2 || got[0].typ != watch.Added || got[1].err != boom {
		t.Fatalf("got %v, want one event and then %v unchanged", got, boom)
	}
}

// endless is a stream that never ends: an unterminated string, forever.
type endless struct{ started bool }

func (e *endless) Read(p []byte) (int, error) {
	if !e.started {
		e.started = true
		return copy(p, `{"type":"ADDED","object":{"a":"`), nil
	}
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestWatchDecoderFailsAFrameThatNeverEndsInsteadOfBufferingIt(t *testing.T) {
	defer func(m int) { maxFrame = m }(maxFrame)
	maxFrame = 1 << 20
	d := NewWatchDecoder(io.NopCloser(&endless{}), BuildOptions{})
	_, _, err := d.Decode()
	if err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Fatalf("Decode = %v, want an error naming the 1 MiB limit", err)
	}
	if _, _, again := d.Decode(); again == nil || again.Error() != err.Error() {
		t.Errorf("the next Decode gave %v, want the same error again", again)
	}
	if c := cap(d.frames.buf); c > 4*maxFrame {
		t.Errorf("the buffer grew to %d bytes for a %d-byte limit", c, maxFrame)
	}
}

// envelopes are layouts of a watch event other than the apiserver's
// compact one, which WatchDecoder reads the long way, and near misses of
// the compact one.
var envelopes = []string{
	`{"object":{"metadata":{"name":"a"}},"type":"ADDED"}`,
	`{ "type" : "ADDED" , "object" : {"metadata":{"name":"a"}} }`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}} }`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}},"extra":{"b":[]}}`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}},"type":"DELETED"}`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}},"object":{"metadata":{"name":"b"}}}`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}},"object":[]}`,
	`{"type":"ADD\u0045D","object":{"metadata":{"name":"a"}}}`,
	`{"type":"ADDED\"","object":{"metadata":{"name":"a"}}}`,
	`{"ty\u0070e":"ADDED","object":{"metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":[{"metadata":{"name":"a"}}]}`,
	`{"type":"ADDED","object":"{}"}`,
	`{"type":"ADDED","objects":{"metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{}}`,
	`{"type":"","object":{}}`,
	`{"type":"ERROR","object":{"kind":"Status","code":410,"details":{"causes":[]}}}`,
}

func TestWatchDecoderReadsEveryEnvelopeLayoutAsEncodingJSONDoes(t *testing.T) {
	for _, e := range envelopes {
		got := decodeAll(t, newDecoder([]byte(e), 3))
		want := decodeAll(t, &refDecoder{dec: json.NewDecoder(strings.NewReader(e))})
		if len(got) != len(want) || !reflect.DeepEqual(got[:len(got)-1], want[:len(want)-1]) ||
			(got[len(got)-1].err == io.EOF) != (want[len(want)-1].err == io.EOF) {
			t.Errorf("%s:\n%s", e, diffResults(got, want))
		}
	}
}

// FuzzWatchDecoder feeds streams to WatchDecoder and to the encoding/json
// decoder it replaced, read n bytes at a time, and requires the same
// events and an error at the same point. Where the two errors differ in
// kind, the only allowed difference is a stream that ends inside a frame
// that was malformed before the cut: encoding/json reports the syntax
// error, WatchDecoder the truncation, because it validates a frame once
// the frame is complete; and the reverse for a value that is not an object,
// which WatchDecoder rejects at its first byte.
func FuzzWatchDecoder(f *testing.F) {
	for i, s := range append(seeds(), tricky...) {
		typ := []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}[i%4]
		f.Add(append(watchFrame(typ, s), '\n'), uint16(i))
		if len(s) > 16<<10 {
			// Large inputs slow every mutation down; the widget's one
			// frame is enough, and the unit tests stream many.
			continue
		}
		f.Add(append(append(watchFrame(typ, s), watchFrame("DELETED", s)...), " \n"...), uint16(3))
		f.Add(watchFrame(typ, s)[:len(s)/2], uint16(1))
	}
	f.Add([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`), uint16(7))
	f.Add([]byte(`{"object":{"metadata":{"name":"a"}},"type":"ADDED","type":"DELETED"}`), uint16(2))
	f.Add([]byte(`{"ty\u0070e":"ADD\u0045D","object":{}} {"type":"ADDED","object":null}`), uint16(9))
	f.Add([]byte(`{"type":"ADDED","object":{"a":[1,-0.5e+3,true,false,null,"\ud83d\ude00"]}}`+"\n"+`{"type":"ADDED","object":{"a":tru}}`), uint16(5))
	f.Add([]byte("\xff"), uint16(0))
	for i, e := range envelopes {
		f.Add([]byte(e), uint16(i))
	}
	f.Fuzz(func(t *testing.T, stream []byte, n uint16) {
		got := decodeAll(t, newDecoder(stream, int(n)+1))
		want := decodeAll(t, &refDecoder{dec: json.NewDecoder(&chunkReader{b: stream, n: int(n) + 1})})
		last := len(want) - 1
		if len(got) != len(want) || !reflect.DeepEqual(got[:last], want[:last]) {
			t.Fatalf("stream %q\n%s", stream, diffResults(got, want))
		}
		g, w := got[last].err, want[last].err
		switch {
		case w == io.EOF || g == io.EOF:
			if g != w {
				t.Fatalf("end of stream %q: got %v, encoding/json %v", stream, g, w)
			}
		case w == io.ErrUnexpectedEOF:
			// A value that is not an object is rejected at its first byte,
			// before its end could be missed.
			if g != w && !errors.Is(g, errNotObject) {
				t.Fatalf("truncated stream %q: got %v, encoding/json %v", stream, g, w)
			}
		}
	})
}
