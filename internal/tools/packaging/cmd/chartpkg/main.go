// Command chartpkg packages charts/kubewire into <dir>/kubewire-<version>.tgz
// with the Helm SDK, as `helm package` would, so a release needs no helm
// binary. `make release` runs it.
//
// Helm stamps each file in the archive with the time of packaging; with
// -mtime (make release passes the commit time) every file gets that time
// instead, so packaging one commit twice gives the same bytes and the same
// checksum.
package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/kubewire/kubewire/internal/tools/packaging"
)

func main() {
	out := flag.String("o", "dist", "directory to write the chart archive to")
	mtime := flag.String("mtime", "", "RFC 3339 time to stamp every file in the archive with (default: now, as helm does)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "chartpkg: takes no arguments")
		os.Exit(2)
	}
	path, err := run(*out, *mtime)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartpkg:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func run(out, mtime string) (string, error) {
	var stamp time.Time
	if mtime != "" {
		t, err := time.Parse(time.RFC3339, mtime)
		if err != nil {
			return "", fmt.Errorf("-mtime %q: want an RFC 3339 time: %w", mtime, err)
		}
		stamp = t
	}
	root, err := packaging.RepoRoot()
	if err != nil {
		return "", err
	}
	ch, err := loader.LoadDir(filepath.Join(root, packaging.ChartPath))
	if err != nil {
		return "", err
	}
	path, err := chartutil.Save(ch, out) // validates the chart's metadata first
	if err != nil {
		return "", err
	}
	if !stamp.IsZero() {
		if err := restamp(path, stamp); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	return path, nil
}

// restamp rewrites the gzipped tar at path with every entry's modification
// time set to t, keeping the entries, their order and the gzip header
// (Helm marks its archives there).
func restamp(path string, t time.Time) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".chartpkg-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	zw := gzip.NewWriter(tmp)
	zw.Header = zr.Header
	zw.ModTime = time.Time{} // gzip's own timestamp stays unset, as Helm leaves it
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime = t.UTC()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
