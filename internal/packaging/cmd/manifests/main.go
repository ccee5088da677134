// Command manifests regenerates deploy/kubewire.yaml from charts/kubewire
// with the chart's default values. `make manifests` runs it; a test in
// internal/packaging fails when the file is out of date.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubewire/kubewire/internal/packaging"
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
