package config

import (
	_ "embed"
	"fmt"
)

// ExampleYAML is a complete, valid example configuration: configmaps in all
// namespaces and the demo Widget custom resource, printed to stdout. It is
// what `make demo` runs with.
//
//go:embed example.yaml
var ExampleYAML []byte

// Default returns ExampleYAML parsed, defaulted and validated with the sink
// types of types. It panics if the embedded example is invalid, which the
// package's tests rule out.
func Default(types SinkTypes) *Config {
	cfg, err := Parse(ExampleYAML, types)
	if err != nil {
		panic(fmt.Sprintf("config: embedded example.yaml is invalid: %v", err))
	}
	return cfg
}
