package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Load reads, decodes, defaults and validates the configuration file at
// path, with each sink's block decoded by its type in types. Problems with
// the file's contents are returned as a *Error naming the file; failure to
// read the file is returned as is (wrapped).
func Load(path string, types SinkTypes) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return parse(data, path, types)
}

// Parse decodes, defaults and validates a configuration, with each sink's
// block decoded by its type in types. Every problem is reported at once in
// a *Error.
func Parse(data []byte, types SinkTypes) (*Config, error) {
	return parse(data, "", types)
}

func parse(data []byte, file string, types SinkTypes) (*Config, error) {
	cfg, errs := decode(data, types)
	if len(errs) > 0 {
		return nil, &Error{File: file, Errors: errs}
	}
	return cfg, nil
}

// decode turns YAML into a defaulted, validated Config. It returns a nil
// Config when the input is too broken to say more than the returned errors.
func decode(data []byte, types SinkTypes) (*Config, field.ErrorList) {
	var errs field.ErrorList

	if n := countDocuments(data); n > 1 {
		errs = append(errs, fileError(fmt.Sprintf(
			"the file holds %d YAML documents separated by ---; a configuration is exactly one document", n)))
	}

	// YAML to JSON. The strict conversion rejects duplicate keys, which the
	// plain one silently resolves to the last value; report them and carry
	// on with the plain conversion so other problems are reported too.
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		var te *yamlv2.TypeError
		if !errors.As(err, &te) {
			return nil, append(errs, fileError("malformed YAML: "+strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		for _, msg := range te.Errors {
			errs = append(errs, fileError("duplicate key: "+msg))
		}
		if j, err = yaml.YAMLToJSON(data); err != nil {
			return nil, append(errs, fileError("malformed YAML: "+strings.TrimPrefix(err.Error(), "yaml: ")))
		}
	}

	// Check value types against the schema on a generic decoding first: the
	// typed decoder stops reporting at the first type error and gives it no
	// precise path. Values of the wrong type are reported and dropped.
	var tree any
	if err := strictjson.UnmarshalCaseSensitivePreserveInts(j, &tree); err != nil {
		return nil, append(errs, fileError("internal error: cannot re-read converted YAML: "+err.Error()))
	}
	if tree != nil {
		if _, ok := tree.(map[string]any); !ok {
			return nil, append(errs, fileError(fmt.Sprintf(
				"the configuration must be a YAML mapping with fields such as apiVersion, kind and cluster, not %s", describe(tree))))
		}
	}
	tc := typeChecker{given: map[string]bool{}}
	tc.check(tree, reflect.TypeFor[Config](), nil)
	errs = append(errs, tc.errs...)
	tc.errs = nil
	// Sink blocks are decoded by their own types below; the typed decoding
	// of the file sees only the fields every sink has.
	blocks := takeSinkBlocks(tree)
	if j, err = json.Marshal(tree); err != nil {
		return nil, append(errs, fileError("internal error: "+err.Error()))
	}

	// Typed, strict decoding: reports every unknown and duplicate field.
	cfg := &Config{}
	strictErrs, err := strictjson.UnmarshalStrict(j, cfg)
	if err != nil {
		return nil, append(errs, fileError("cannot decode the configuration: "+err.Error()))
	}
	for _, se := range strictErrs {
		errs = append(errs, strictFieldError(se))
	}
	errs = append(errs, decodeSinkBlocks(cfg, blocks, types, &tc)...)
	errs = append(errs, tc.errs...)

	// Blocks are validated as the file gave them, then defaulted.
	applyDefaults(cfg, tc.given)
	for _, ve := range validate(cfg, types, tc.given) {
		// A value already reported for its type was dropped; errors about
		// the resulting empty value would only be noise.
		if !tc.covers(ve.Field) {
			errs = append(errs, ve)
		}
	}
	defaultSinkBlocks(cfg)
	return cfg, errs
}

// countDocuments returns the number of YAML documents in data, or 0 if it
// cannot tell (malformed YAML is reported elsewhere).
func countDocuments(data []byte) int {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return n
		}
		if err != nil {
			return 0
		}
		n++
	}
}

// strictFieldError turns an error from sigs.k8s.io/json's strict decoding
// into a field error with the field's path.
func strictFieldError(err error) *field.Error {
	var fe strictjson.FieldError
	if !errors.As(err, &fe) {
		return fileError(err.Error())
	}
	if strings.HasPrefix(err.Error(), "duplicate field") {
		return &field.Error{Type: field.ErrorTypeDuplicate, Field: fe.FieldPath(), BadValue: field.OmitValueType{},
			Detail: "the field is given more than once"}
	}
	return &field.Error{Type: field.ErrorTypeForbidden, Field: fe.FieldPath(), BadValue: "", Detail: "unknown field"}
}

var durationType = reflect.TypeFor[Duration]()

// typeChecker walks a generic JSON value alongside the Go type it will be
// decoded into, reporting values of the wrong type (and replacing them with
// null so the typed decoding succeeds) and recording which fields are
// present. Unknown fields are left for the strict decoder to report.
type typeChecker struct {
	errs  field.ErrorList
	bad   []string        // paths of dropped values
	given map[string]bool // paths of fields present with a usable value
}

func (tc *typeChecker) check(v any, t reflect.Type, p *field.Path) bool {
	if v == nil || t == durationType {
		return true // null means "not set"; Duration reports its own problems
	}
	switch t.Kind() {
	case reflect.Pointer:
		return tc.check(v, t.Elem(), p)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return tc.fail(v, p, "must be a mapping")
		}
		for i := range t.NumField() {
			name := jsonName(t.Field(i))
			val, ok := m[name]
			if name == "" || !ok {
				continue
			}
			child := childPath(p, name)
			switch {
			case !tc.check(val, t.Field(i).Type, child):
				m[name] = nil
			case val != nil:
				// null is the same as leaving the field out.
				tc.given[child.String()] = true
			}
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return tc.fail(v, p, "must be a list")
		}
		for i := range l {
			if !tc.check(l[i], t.Elem(), p.Index(i)) {
				l[i] = nil
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			want := "must be a string"
			if _, isBool := v.(bool); isBool {
				want += " (YAML reads unquoted yes, no, on, off, true and false as booleans: quote the value)"
			}
			return tc.fail(v, p, want)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return tc.fail(v, p, "must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			return tc.fail(v, p, "must be a whole number")
		}
		if reflect.New(t).Elem().OverflowInt(n) {
			return tc.fail(v, p, "is out of range")
		}
	case reflect.Float32, reflect.Float64:
		var f float64
		switch n := v.(type) {
		case int64:
			f = float64(n)
		case float64:
			f = n
		default:
			return tc.fail(v, p, "must be a number")
		}
		if reflect.New(t).Elem().OverflowFloat(f) {
			return tc.fail(v, p, "is out of range")
		}
	}
	return true
}

func (tc *typeChecker) fail(v any, p *field.Path, want string) bool {
	var e *field.Error
	switch v.(type) {
	case map[string]any, []any:
		e = field.TypeInvalid(p, field.OmitValueType{}, want+", not "+describe(v))
	default:
		e = field.TypeInvalid(p, v, want)
	}
	tc.errs = append(tc.errs, e)
	tc.bad = append(tc.bad, p.String())
	return false
}

// covers reports whether path is, or is inside, a value dropped for its type.
func (tc *typeChecker) covers(path string) bool {
	for _, b := range tc.bad {
		if path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return true
		}
	}
	return false
}

func childPath(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

func jsonName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if tag == "-" || !f.IsExported() {
		return ""
	}
	if tag == "" {
		return f.Name
	}
	return tag
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
