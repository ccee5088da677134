package raw

import (
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// ErrNotObject is returned for bytes that are not a JSON object.
var ErrNotObject = errors.New("raw: not a JSON object")

// ErrInvalid is returned, when BuildOptions.Validate is set, for bytes that
// are not valid JSON.
var ErrInvalid = errors.New("raw: watch event is not valid JSON")

// BuildOptions say how New turns served bytes into an Object.
type BuildOptions struct {
	// KeepManagedFields keeps metadata.managedFields in the bytes.
	KeepManagedFields bool
	// TypeMeta is `"kind":"…","apiVersion":"…"` to insert into an object
	// that has neither, as list items of built-in types come. client-go's
	// unstructured decoding fills them in the same way, so both cache modes
	// publish the same data. Built once per list, not per item.
	TypeMeta []byte
	// Rewrite, when set, is applied to the decoded object before it is
	// cached (redaction: secret values must never sit in the cache). The
	// object is then decoded and re-encoded, which costs what the
	// unstructured path costs, but only for resources that need it.
	Rewrite func(map[string]any)
	// KeyPrefix, when set, is the prefix of the object's partition key
	// (kubewire's Resource.KeyPrefix): New builds "<prefix>/<key>" into the
	// object's one allocation, so no event pays for the concatenation.
	KeyPrefix string
	// Validate makes New check that in is valid JSON, in the pass that
	// reads its metadata, and fail with ErrInvalid if it is not. The watch
	// decoder sets it: its frames are validated here and nowhere else.
	Validate bool
}

// str views b as a string without copying. The caller must not modify b
// while the string is in use.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// New builds an Object from the JSON of one object. in is not retained and
// may be reused by the caller afterwards: New copies what it keeps into one
// allocation sized for the result, so a cached object never pins the list
// response or watch frame it came from.
//
// Unless opt.Validate is set, in must be valid JSON (it comes from a
// decoder that checked it, or from the apiserver): New does not check it.
func New(in []byte, opt BuildOptions) (*Object, error) {
	if opt.Rewrite != nil {
		var err error
		if in, err = rewrite(in, opt.Rewrite); err != nil {
			return nil, err
		}
	}
	s := str(in)
	open := skipSpace(s, 0)
	if open >= len(s) || s[open] != '{' {
		return nil, ErrNotObject
	}
	sc, ok := scanFast(s, opt.Validate)
	if !ok {
		if opt.Validate && !gjson.Valid(s) {
			return nil, ErrInvalid
		}
		sc = scanGJSON(s, len(opt.TypeMeta) > 0)
	}
	cutFrom, cutTo := -1, -1
	if sc.managedFields >= 0 && !opt.KeepManagedFields {
		cutFrom, cutTo = memberSpan(s, sc.managedFields, sc.managedFieldsEnd)
	}
	cb, hasCB := sc.changedBy, sc.hasChangedBy
	name, namespace, uid, resourceVersion, generation := sc.name, sc.namespace, sc.uid, sc.resourceVersion, sc.generation

	var typeMeta []byte
	if len(opt.TypeMeta) > 0 && !sc.hasKind && !sc.hasAPIVersion {
		typeMeta = opt.TypeMeta
	}

	// inserted is how many bytes go in after the opening brace.
	inserted := len(typeMeta)
	if typeMeta != nil && !emptyObject(s, open) {
		inserted++ // the comma after the inserted members
	}
	n := len(in) + inserted
	if cutFrom >= 0 {
		n -= cutTo - cutFrom
	}
	ns, nm := stringValue(namespace), stringValue(name)
	keyLen := 0
	if opt.KeyPrefix != "" || ns != "" {
		keyLen = keyLength(opt.KeyPrefix, ns, nm)
	}
	buf := make([]byte, 0, n+len(cb.Manager)+len(cb.Operation)+len(cb.Time)+keyLen)
	buf = append(buf, in[:open+1]...)
	if typeMeta != nil {
		buf = append(buf, typeMeta...)
		if !emptyObject(s, open) {
			buf = append(buf, ',')
		}
	}
	if cutFrom >= 0 {
		buf = append(buf, in[open+1:cutFrom]...)
		buf = append(buf, in[cutTo:]...)
	} else {
		buf = append(buf, in[open+1:]...)
	}
	o := &Object{JSON: buf[:len(buf):len(buf)]}

	// The identity strings point into the copy, so they cost no
	// allocation and do not pin in: a value at offset p of in is at
	// offset p+inserted of the copy, less the cut if it came after it.
	inCopy := func(v gjson.Result) string {
		if v.Type != gjson.String {
			return ""
		}
		if len(v.Raw) != len(v.Str)+2 {
			// Escaped: gjson unescaped it into a string of its own.
			return v.Str
		}
		p := v.Index + 1 + inserted
		if cutFrom >= 0 && v.Index >= cutTo {
			p -= cutTo - cutFrom
		}
		return str(o.JSON[p : p+len(v.Str)])
	}
	o.name, o.namespace = inCopy(name), inCopy(namespace)
	o.uid, o.resourceVersion = inCopy(uid), inCopy(resourceVersion)
	if resourceVersion.Type == gjson.String && len(resourceVersion.Raw) == len(resourceVersion.Str)+2 {
		end := resourceVersion.Index + len(resourceVersion.Raw) + inserted
		if cutFrom >= 0 && resourceVersion.Index >= cutTo {
			end -= cutTo - cutFrom
		}
		o.rvEnd = end
	}
	if generation.Type == gjson.Number {
		o.generation = generation.Int()
	}
	if hasCB {
		// The provenance strings live in the same allocation, after the
		// JSON, because the bytes they came from have just been cut.
		o.changedBy = ChangedBy{
			Manager:   tail(&buf, cb.Manager),
			Operation: tail(&buf, cb.Operation),
			Time:      tail(&buf, cb.Time),
		}
		o.hasChangedBy = true
	}
	o.key = o.name
	if keyLen > 0 {
		// After the JSON too, and from the copied identity strings, so the
		// keys pin nothing but the object itself.
		start := len(buf)
		if opt.KeyPrefix != "" {
			buf = append(append(buf, opt.KeyPrefix...), '/')
		}
		keyStart := len(buf)
		if o.namespace != "" {
			buf = append(append(buf, o.namespace...), '/')
		}
		buf = append(buf, o.name...)
		o.key = str(buf[keyStart:])
		if opt.KeyPrefix != "" {
			o.prefixedKey = str(buf[start:])
		}
	}
	return o, nil
}

// keyLength is the length of "<prefix>/<namespace>/<name>", each part and
// its slash left out where empty.
func keyLength(prefix, namespace, name string) int {
	n := len(name)
	if prefix != "" {
		n += len(prefix) + 1
	}
	if namespace != "" {
		n += len(namespace) + 1
	}
	return n
}

// tail appends s to buf within its capacity and returns the appended bytes
// as a string.
func tail(buf *[]byte, s string) string {
	if s == "" {
		return ""
	}
	start := len(*buf)
	*buf = append(*buf, s...)
	b := (*buf)[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// memberSpan returns the bytes to delete to remove the object member whose
// key starts at keyStart and whose value ends at valueEnd, including one of
// the commas around it, so the rest stays valid JSON. gjson found both ends;
// this only looks at the whitespace and punctuation next to them.
func memberSpan(s string, keyStart, valueEnd int) (int, int) {
	if i := skipSpace(s, valueEnd); i < len(s) && s[i] == ',' {
		return keyStart, i + 1
	}
	// The last member: take the comma before it, if any.
	i := keyStart - 1
	for i >= 0 && isSpace(s[i]) {
		i--
	}
	if i >= 0 && s[i] == ',' {
		return i, valueEnd
	}
	return keyStart, valueEnd
}

func emptyObject(s string, open int) bool {
	i := skipSpace(s, open+1)
	return i < len(s) && s[i] == '}'
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// rewrite decodes in as the unstructured path would (integers as int64),
// applies f and encodes the result.
func rewrite(in []byte, f func(map[string]any)) ([]byte, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(in, &m); err != nil {
		return nil, fmt.Errorf("raw: decode for rewrite: %w", err)
	}
	if m == nil {
		return nil, ErrNotObject
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("raw: encode after rewrite: %w", err)
	}
	return out, nil
}
