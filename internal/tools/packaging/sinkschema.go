package packaging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SchemaPath is the chart's values schema, relative to the repository root.
const SchemaPath = ChartPath + "/values.schema.json"

// sinkPropertiesPath leads from the root of values.schema.json to the
// properties of one entry of config.sinks.
var sinkPropertiesPath = []string{"properties", "config", "properties", "sinks", "items", "properties"}

// commonSinkFields are the properties every sink has (config.Sink); every
// other property of a sink entry is a type's block, owned by its spec.
var commonSinkFields = []string{"name", "type", "overflow", "spool"}

// SinkBlockSchema is what the schema needs of a sink type: its name and the
// JSON Schema of its block.
type SinkBlockSchema struct {
	Type   string
	Schema string
}

// WithSinkSchemas returns values.schema.json with the sink entry's type
// enum and blocks replaced by those of types, in the order given, after the
// type property. The rest of the file is left byte for byte as it was, so a
// hand edit elsewhere survives `make manifests`.
func WithSinkSchemas(schema []byte, types []SinkBlockSchema) ([]byte, error) {
	start, end, err := findValue(schema, sinkPropertiesPath)
	if err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	keys, vals, err := objectMembers(schema[start:end])
	if err != nil {
		return nil, fmt.Errorf("values.schema.json: sink properties: %w", err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	member := func(k string, v []byte) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteByte(':')
		b.Write(v)
	}
	for i, k := range keys {
		if !slices.Contains(commonSinkFields, k) {
			continue // an old block: the specs write the blocks below
		}
		if k != "type" {
			member(k, vals[i])
			continue
		}
		names := make([]string, len(types))
		for j, t := range types {
			names[j] = t.Type
		}
		enum, err := json.Marshal(map[string][]string{"enum": names})
		if err != nil {
			return nil, err
		}
		member("type", enum)
		for _, t := range types {
			if !json.Valid([]byte(t.Schema)) {
				return nil, fmt.Errorf("the schema of sink type %s is not valid JSON", t.Type)
			}
			member(t.Type, []byte(t.Schema))
		}
	}
	b.WriteByte('}')

	var out bytes.Buffer
	out.Write(schema[:start])
	if err := json.Indent(&out, b.Bytes(), indentOf(schema, start), "  "); err != nil {
		return nil, err
	}
	out.Write(schema[end:])
	return out.Bytes(), nil
}

// findValue returns the byte range of the value at path, a list of object
// keys from the root.
func findValue(data []byte, path []string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for depth, want := range path {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return 0, 0, fmt.Errorf("%s is not an object", strings.Join(path[:depth], "."))
		}
		for {
			t, err := dec.Token()
			if err != nil {
				return 0, 0, err
			}
			k, ok := t.(string)
			if !ok {
				return 0, 0, fmt.Errorf("no %s", strings.Join(path[:depth+1], "."))
			}
			if k == want {
				break
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, 0, err
			}
		}
	}
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return 0, 0, err
	}
	end = int(dec.InputOffset())
	return end - len(v), end, nil
}

// objectMembers returns the keys and raw values of a JSON object, in order.
func objectMembers(obj []byte) (keys []string, vals [][]byte, err error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, errors.New("not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, t.(string))
		vals = append(vals, v)
	}
	return keys, vals, nil
}

// indentOf returns the leading whitespace of the line holding offset.
func indentOf(data []byte, offset int) string {
	line := data[bytes.LastIndexByte(data[:offset], '\n')+1 : offset]
	return string(line[:len(line)-len(bytes.TrimLeft(line, " \t"))])
}
