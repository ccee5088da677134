package nodecluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images the node cluster imports. Nothing can be pulled on our
// machines, so each is built here from Go sources, written as an image
// tarball and imported into containerd's k8s.io namespace, where the CRI
// finds it.
const (
	// KubewireImage is kubewire as the Dockerfile builds it: the static
	// binary at /kubewire, run as 65532:65532. It also carries /inside
	// (cmd/inside), which tests exec to look at the container from within.
	KubewireImage = "kubewire.test/kubewire:e2e"
	// CurlImage stands in for the curl image of the chart's `helm test`
	// Pod (cmd/curl); the chart names it by digest.
	CurlImage = "kubewire.test/curl:e2e"
)

// image is one image to build: its files, each built from a main package.
type image struct {
	ref        string
	files      map[string]string // path in the image -> Go main package
	entrypoint []string
	user       string
}

func images() []image {
	const nonroot = "65532:65532" // distroless' nonroot, as in the Dockerfile
	return []image{
		{ref: PauseImage, files: map[string]string{"/pause": "./internal/testing/nodecluster/cmd/pause"}, entrypoint: []string{"/pause"}, user: nonroot},
		{ref: KubewireImage, files: map[string]string{
			"/kubewire": "./cmd/kubewire",
			"/inside":   "./internal/testing/nodecluster/cmd/inside",
		}, entrypoint: []string{"/kubewire"}, user: nonroot},
		{ref: CurlImage, files: map[string]string{"/usr/bin/curl": "./internal/testing/nodecluster/cmd/curl"}, entrypoint: []string{"/usr/bin/curl"}, user: nonroot},
	}
}

// shared holds what is built once per test process and used by every
// cluster it starts: the image tarballs and the chart package. Main
// removes it.
var shared struct {
	once     sync.Once
	dir      string
	err      error
	images   onceResult
	chart    onceResult
	tarballs []string
}

type onceResult struct {
	once sync.Once
	err  error
}

func sharedDir() (string, error) {
	shared.once.Do(func() { shared.dir, shared.err = os.MkdirTemp("", "kwnode-shared-") })
	return shared.dir, shared.err
}

// Main runs a test binary's tests and then removes what they built once
// for all their clusters; call it from TestMain.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// builtImages builds the images once per process.
func builtImages(ctx context.Context) ([]string, error) {
	shared.images.once.Do(func() {
		dir, err := sharedDir()
		if err != nil {
			shared.images.err = err
			return
		}
		root, err := moduleRoot()
		if err != nil {
			shared.images.err = err
			return
		}
		dir = filepath.Join(dir, "images")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			shared.images.err = err
			return
		}
		shared.tarballs, shared.images.err = buildImages(ctx, root, dir)
	})
	return shared.tarballs, shared.images.err
}

// buildImages compiles the images' binaries from the module at root, the
// way the Dockerfile does (static, trimmed), and writes one tarball per
// image into dir. It returns the tarballs' paths.
func buildImages(ctx context.Context, root, dir string) ([]string, error) {
	var tarballs []string
	for i, im := range images() {
		var layer bytes.Buffer
		tw := tar.NewWriter(&layer)
		for path, pkg := range im.files {
			bin := filepath.Join(dir, filepath.Base(path)+"-bin")
			cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("building %s for %s: %w\n%s", pkg, im.ref, err, out)
			}
			b, err := os.ReadFile(bin)
			if err != nil {
				return nil, err
			}
			if err := addFile(tw, path, b); err != nil {
				return nil, err
			}
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		img, err := imageOf(im, layer.Bytes())
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.ref, err)
		}
		tag, err := name.NewTag(im.ref)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		if err := tarball.WriteToFile(path, tag, img); err != nil {
			return nil, fmt.Errorf("writing %s: %w", im.ref, err)
		}
		tarballs = append(tarballs, path)
	}
	return tarballs, nil
}

// addFile adds an executable and its parent directories to tw.
func addFile(tw *tar.Writer, path string, b []byte) error {
	var dirs []string
	for d := filepath.Dir(path); d != "/"; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

func imageOf(im image, layerTar []byte) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Config.Entrypoint = im.entrypoint
	cfg.Config.User = im.user
	return mutate.ConfigFile(img, cfg)
}

// importImages loads the tarballs into containerd's k8s.io namespace.
func importImages(ctx context.Context, address string, tarballs []string) error {
	for _, t := range tarballs {
		out, err := exec.CommandContext(ctx, "ctr", "--address", address, "--namespace", "k8s.io", "images", "import", t).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", t, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// imageDigest returns the digest containerd knows ref by, which is what
// a Pod naming the image by digest (repository@sha256:...) must use.
func imageDigest(ctx context.Context, address, ref string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", address, "--namespace", "k8s.io", "images", "list", "name=="+ref).Output()
	if err != nil {
		return "", fmt.Errorf("ctr images list: %w", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == ref {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("image %s not in containerd:\n%s", ref, out)
}

// tagImage gives the image ref a second name in containerd.
func tagImage(ctx context.Context, address, ref, name string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", address, "--namespace", "k8s.io", "images", "tag", ref, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images tag %s %s: %w: %s", ref, name, err, bytes.TrimSpace(out))
	}
	return nil
}
