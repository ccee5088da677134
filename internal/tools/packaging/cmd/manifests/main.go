// Command manifests regenerates the sink types and blocks of the chart's
// values.schema.json from the registered sink specs, and deploy/kubewire.yaml
// from charts/kubewire with the chart's default values. `make manifests`
// runs it; tests in internal/tools/packaging fail when either is out of date.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubewire/kubewire/internal/tools/packaging"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := packaging.RepoRoot()
	if err != nil {
		return err
	}
	schemaPath := filepath.Join(root, packaging.SchemaPath)
	schema, err := os.ReadFile(schemaPath)
	if err != nil {
		return err
	}
	if schema, err = packaging.WithSinkSchemas(schema, sinkSchemas()); err != nil {
		return err
	}
	if err := os.WriteFile(schemaPath, schema, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", packaging.SchemaPath)

	out, err := packaging.DeployManifests(filepath.Join(root, packaging.ChartPath))
	if err != nil {
		return err
	}
	path := filepath.Join(root, packaging.DeployPath)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", packaging.DeployPath)
	return nil
}

// sinkSchemas lists the block schema of every sink type kubewire ships, in
// the registry's order.
func sinkSchemas() []packaging.SinkBlockSchema {
	reg := app.DefaultRegistry()
	var out []packaging.SinkBlockSchema
	for _, t := range reg.Types() {
		out = append(out, packaging.SinkBlockSchema{Type: t, Schema: reg[t].Schema})
	}
	return out
}
