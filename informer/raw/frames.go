package raw

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxDepth is the deepest nesting a watch frame may have. It is
// encoding/json's limit, which the decoder that the frame reader replaced
// enforced, and it bounds the recursion of gjson's validator.
const maxDepth = 10000

// minRead is the smallest read into the frame buffer, and its initial size:
// most frames (a Pod is about 12 KB) then arrive in one read and need no
// copy to make room.
const minRead = 64 << 10

// maxFrame bounds one watch frame. The apiserver's objects are limited to
// a few MiB by etcd, so a frame this large means a broken stream (a string
// that never closes, say), which must fail rather than fill the memory. A
// variable, so tests can lower it.
var maxFrame = 256 << 20

// span is a part of a frame: [start, end).
type span struct{ start, end int }

// frame is one watch event as a frameReader returns it.
type frame struct {
	b []byte
	// nested is the span of the last object or array directly inside b:
	// the object of a watch event, when it is the last member.
	nested span
}

// errNoProgress is returned after a reader returns nothing many times in a
// row, as bufio does, so a broken reader cannot spin the decoder forever.
var errNoProgress = errors.New("raw: watch stream returned no data or error")

// errNotObject is returned for a frame that does not start as a JSON object,
// as soon as its first byte is read: a watch event is always one.
var errNotObject = errors.New("raw: watch event is not a JSON object")

// frameReader splits a stream of JSON objects, such as a watch response,
// into frames. It finds the end of each frame with a bracket count that
// only has to know about strings; the WatchDecoder validates the frame
// (see decode), where the encoding/json Decoder it replaced made two
// passes (one to find the end of the frame, one more to unmarshal it).
//
// The scan of a frame is resumable: when a frame arrives in many reads,
// each byte is still scanned once.
type frameReader struct {
	r   io.Reader
	buf []byte
	// off is where the bytes not yet returned start.
	off int
	// The state of the scan of the frame that starts at off: scanned
	// bytes from off have been looked at (0 when the frame's start has not
	// been found yet), depth is the nesting there and inString whether that
	// point is inside a string.
	scanned  int
	depth    int
	inString bool
	// nested is the span of the last object or array directly inside
	// the frame, so far.
	nested span
	// err is the reader's error, returned once the bytes read before it
	// are used up.
	err error
	// failed is the first error next returned, which every later call
	// returns again: after a bad frame the stream cannot be trusted to
	// resume at a frame boundary, and a caller that kept reading must not
	// see the frames after it as if nothing had been lost.
	failed error
}

func newFrameReader(r io.Reader) *frameReader { return &frameReader{r: r} }

// next returns the next frame: one JSON object, not validated. Its bytes alias
// the reader's buffer and are valid until the next call. At the end of the
// stream it returns io.EOF, or io.ErrUnexpectedEOF when the stream ends
// inside a frame, as encoding/json's Decoder does; the reader's own errors
// are returned unchanged.
func (f *frameReader) next() (frame, error) {
	if f.failed != nil {
		return frame{}, f.failed
	}
	fr, err := f.read()
	if err != nil {
		f.failed = err
	}
	return fr, err
}

func (f *frameReader) read() (frame, error) {
	for {
		end, err := f.scan()
		if err != nil {
			return frame{}, err
		}
		if end > 0 {
			fr := frame{b: f.buf[f.off : f.off+end], nested: f.nested}
			f.off += end
			f.scanned, f.depth, f.inString, f.nested = 0, 0, false, span{}
			return fr, nil
		}
		if err := f.fill(); err != nil {
			if err == io.EOF && f.scanned > 0 {
				return frame{}, io.ErrUnexpectedEOF
			}
			return frame{}, err
		}
	}
}

// scan continues the scan of the frame at off through the bytes read so
// far. It returns the frame's length once its closing brace is found, or
// 0 when more bytes are needed.
func (f *frameReader) scan() (int, error) {
	b := f.buf[f.off:]
	i := f.scanned
	if i == 0 {
		// Between frames: skip whitespace, then the next frame must open.
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		f.off += i
		b, i = b[i:], 0
		if len(b) == 0 {
			return 0, nil
		}
		if b[0] != '{' {
			return 0, fmt.Errorf("%w: it starts with %q", errNotObject, b[0])
		}
		i, f.depth = 1, 1
	}
	depth, inString, nested := f.depth, f.inString, f.nested
	for i < len(b) {
		if inString {
			// The closing quote is the first one not escaped, that is not
			// preceded by an odd number of backslashes. Long strings
			// (annotations, certificates) are then skipped at IndexByte's
			// speed.
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				i = len(b)
				break
			}
			i += q
			n := 0
			for j := i - 1; b[j] == '\\'; j-- {
				n++
			}
			i++
			inString = n%2 == 1
			continue
		}
		switch b[i] {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth == 2 {
				nested.start = i
			} else if depth > maxDepth {
				return 0, fmt.Errorf("raw: watch event nests deeper than %d", maxDepth)
			}
		case '}', ']':
			depth--
			if depth == 1 {
				nested.end = i + 1
			} else if depth == 0 {
				f.nested = nested
				return i + 1, nil
			}
		}
		i++
	}
	f.scanned, f.depth, f.inString, f.nested = i, depth, inString, nested
	return 0, nil
}

// fill reads more of the stream into the buffer, making room first by
// moving the unreturned bytes to its start or by growing it.
func (f *frameReader) fill() error {
	if f.err != nil {
		return f.err
	}
	if f.off == len(f.buf) {
		f.buf, f.off = f.buf[:0], 0
	}
	if len(f.buf)-f.off >= maxFrame {
		return fmt.Errorf("raw: watch event larger than %d MiB", maxFrame>>20)
	}
	if cap(f.buf)-len(f.buf) < minRead {
		if f.off > 0 && cap(f.buf)-(len(f.buf)-f.off) >= minRead {
			n := copy(f.buf, f.buf[f.off:])
			f.buf, f.off = f.buf[:n], 0
		} else {
			nb := make([]byte, len(f.buf)-f.off, max(2*cap(f.buf), minRead))
			copy(nb, f.buf[f.off:])
			f.buf, f.off = nb, 0
		}
	}
	for range 100 {
		n, err := f.r.Read(f.buf[len(f.buf):cap(f.buf)])
		f.buf = f.buf[:len(f.buf)+n]
		if err != nil {
			f.err = err
			if n > 0 {
				return nil
			}
			return err
		}
		if n > 0 {
			return nil
		}
	}
	return errNoProgress
}

// envelope returns the type and object of a frame written as the apiserver
// writes one, {"type":"…","object":{…}}, without parsing the object: the
// scan already found where it ends. ok is false for any other layout
// (whitespace, other members, escapes in the type), which the caller then
// parses in full.
func (fr frame) envelope() (typ string, obj []byte, ok bool) {
	const head, sep = `{"type":"`, `","object":`
	b := fr.b
	if !bytes.HasPrefix(b, []byte(head)) {
		return "", nil, false
	}
	// Without a backslash in the type, the next quote closes it.
	q := len(head) + bytes.IndexByte(b[len(head):], '"')
	if q < len(head) || bytes.IndexByte(b[len(head):q], '\\') >= 0 || !bytes.HasPrefix(b[q:], []byte(sep)) {
		return "", nil, false
	}
	// The object is the last member when the last nested value starts
	// right after the separator and only whitespace follows it.
	start := q + len(sep)
	if fr.nested.start != start || b[len(b)-1] != '}' {
		// The scan counts brackets of either kind, so a frame may end in
		// a ']': only validation, which a frame of the apiserver's
		// layout gets from New, tells that apart.
		return "", nil, false
	}
	for _, c := range b[fr.nested.end : len(b)-1] {
		if !isSpace(c) {
			return "", nil, false
		}
	}
	return str(b[len(head):q]), b[start:fr.nested.end], true
}
