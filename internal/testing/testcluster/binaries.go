// Package testcluster runs a real kube-apiserver backed by a real etcd, so
// that tests and the demo exercise the same watch, RBAC and restart
// behaviour kubewire meets in production rather than a fake clientset's
// approximation of it.
package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Versions of the binaries the harness builds. They are pinned so that every
// developer and CI run tests against the same server behaviour; bump them
// together with the k8s.io modules in go.mod.
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.6.16"
)

// stagingVersion is the version of the k8s.io/* staging modules that
// KubernetesVersion was released with. k8s.io/kubernetes requires them at
// v0.0.0 and relies on replace directives, which are not inherited by
// dependants, so the build module has to spell them out.
const stagingVersion = "v0.36.3"

var stagingModules = []string{
	"api", "apiextensions-apiserver", "apimachinery", "apiserver",
	"cli-runtime", "client-go", "cloud-provider", "cluster-bootstrap",
	"code-generator", "component-base", "component-helpers",
	"controller-manager", "cri-api", "cri-client", "cri-streaming",
	"csi-translation-lib", "dynamic-resource-allocation", "endpointslice",
	"externaljwt", "kms", "kube-aggregator", "kube-controller-manager",
	"kube-proxy", "kube-scheduler", "kubectl", "kubelet", "metrics",
	"mount-utils", "pod-security-admission", "sample-apiserver",
	"sample-cli-plugin", "sample-controller", "streaming",
}

// Binaries holds absolute paths of the server binaries.
type Binaries struct {
	APIServer string
	Etcd      string
}

// binarySpec describes how to produce one binary from source with the Go
// toolchain, which is the only build dependency every contributor already has.
type binarySpec struct {
	name    string   // file name of the binary
	version string   // cache key
	module  string   // module@version to require
	pkg     string   // main package to build
	replace []string // extra go mod edit arguments
	ldflags string
	eta     string // shown to the user before a build starts
}

func apiServerSpec() binarySpec {
	return kubernetesSpec("kube-apiserver", "about 3-6 minutes on 2 cores")
}

// kubernetesSpec builds the command k8s.io/kubernetes/cmd/<name> at
// KubernetesVersion.
func kubernetesSpec(name, eta string) binarySpec {
	s := binarySpec{
		name:    name,
		version: KubernetesVersion,
		module:  "k8s.io/kubernetes@" + KubernetesVersion,
		pkg:     "k8s.io/kubernetes/cmd/" + name,
		eta:     eta,
	}
	for _, m := range stagingModules {
		s.replace = append(s.replace, fmt.Sprintf("-replace=k8s.io/%s=k8s.io/%s@%s", m, m, stagingVersion))
	}
	// Without these the server reports v0.0.0-master, which breaks clients
	// that gate behaviour on the discovered server version.
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	const v = "k8s.io/component-base/version."
	s.ldflags = fmt.Sprintf("-X %sgitVersion=%s -X %sgitMajor=%s -X %sgitMinor=%s -X %sgitTreeState=clean",
		v, KubernetesVersion, v, major, v, minor, v)
	return s
}

func etcdSpec() binarySpec {
	return binarySpec{
		name:    "etcd",
		version: EtcdVersion,
		module:  "go.etcd.io/etcd/server/v3@" + EtcdVersion,
		pkg:     "go.etcd.io/etcd/server/v3",
		eta:     "about 30 seconds",
	}
}

func etcdutlSpec() binarySpec {
	return binarySpec{
		name:    "etcdutl",
		version: EtcdVersion,
		module:  "go.etcd.io/etcd/etcdutl/v3@" + EtcdVersion,
		pkg:     "go.etcd.io/etcd/etcdutl/v3",
		eta:     "about 30 seconds",
	}
}

// CacheDir is where built binaries are kept between runs: $KUBEWIRE_TESTBIN_DIR
// if set, otherwise a kubewire directory under the user cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("KUBEWIRE_TESTBIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating cache dir (set KUBEWIRE_TESTBIN_DIR): %w", err)
	}
	return filepath.Join(d, "kubewire", "testbin"), nil
}

// EnsureBinaries returns the pinned kube-apiserver and etcd, building them
// from source into the cache on first use. Building rather than downloading
// keeps the harness free of release-artifact URLs and checksums. Concurrent
// callers, including other test binaries of the same `go test ./...`, are
// serialised by a file lock so each binary is built only once.
func EnsureBinaries(ctx context.Context, progress io.Writer) (Binaries, error) {
	if progress == nil {
		progress = io.Discard
	}
	dir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("creating cache dir: %w", err)
	}
	unlock, err := lockDir(ctx, dir, progress)
	if err != nil {
		return Binaries{}, err
	}
	defer unlock()

	var bins Binaries
	for _, b := range []struct {
		spec binarySpec
		dst  *string
	}{{etcdSpec(), &bins.Etcd}, {apiServerSpec(), &bins.APIServer}} {
		path, err := ensureBinary(ctx, dir, b.spec, progress)
		if err != nil {
			return Binaries{}, err
		}
		*b.dst = path
	}
	return bins, nil
}

// NodeComponents are the commands of k8s.io/kubernetes that a node runs
// next to the apiserver (internal/testing/nodecluster).
var NodeComponents = []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// EnsureKubernetesBinaries returns the paths of the named commands of
// k8s.io/kubernetes (kubelet, kube-proxy...) at KubernetesVersion, building
// them into the cache on first use exactly as EnsureBinaries builds
// kube-apiserver, under the same lock. eta is shown before each build.
func EnsureKubernetesBinaries(ctx context.Context, progress io.Writer, eta string, names ...string) (map[string]string, error) {
	if progress == nil {
		progress = io.Discard
	}
	dir, err := CacheDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cache dir: %w", err)
	}
	unlock, err := lockDir(ctx, dir, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	paths := make(map[string]string, len(names))
	for _, name := range names {
		path, err := ensureBinary(ctx, dir, kubernetesSpec(name, eta), progress)
		if err != nil {
			return nil, err
		}
		paths[name] = path
	}
	return paths, nil
}

// lockDir takes an exclusive flock on the cache directory's lock file. It
// polls instead of blocking so that a cancelled ctx is honoured while another
// process holds the lock for a multi-minute build.
func lockDir(ctx context.Context, dir string, progress io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for announced := false; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		if !announced {
			fmt.Fprintf(progress, "waiting for another process to finish building test binaries in %s...\n", dir)
			announced = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock on %s: %w", f.Name(), ctx.Err())
		case <-tick.C:
		}
	}
}

// ensureBinary must be called with the cache lock held.
func ensureBinary(ctx context.Context, cacheDir string, s binarySpec, progress io.Writer) (string, error) {
	dir := filepath.Join(cacheDir, s.name+"-"+s.version)
	dst := filepath.Join(dir, s.name)
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	fmt.Fprintf(progress, "building %s %s once into %s (%s)...\n", s.name, s.version, dir, s.eta)
	start := time.Now()
	if err := build(ctx, cacheDir, dst, s); err != nil {
		err = fmt.Errorf("building %s %s: %w", s.name, s.version, err)
		fmt.Fprintln(progress, err)
		return "", err
	}
	fmt.Fprintf(progress, "built %s %s in %s\n", s.name, s.version, time.Since(start).Round(time.Second))
	return dst, nil
}

// build compiles s.pkg inside a throwaway module so that the dependency
// graph of the server never leaks into kubewire's own go.mod.
func build(ctx context.Context, cacheDir, dst string, s binarySpec) error {
	mod, err := os.MkdirTemp(cacheDir, "build-"+s.name+"-")
	if err != nil {
		return fmt.Errorf("creating build module: %w", err)
	}
	defer os.RemoveAll(mod)

	tools := fmt.Sprintf("//go:build tools\n\npackage tools\n\nimport _ %q\n", s.pkg)
	if err := os.WriteFile(filepath.Join(mod, "tools.go"), []byte(tools), 0o644); err != nil {
		return fmt.Errorf("writing tools.go: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+s.name+".tmp")
	buildArgs := []string{"build", "-trimpath", "-o", tmp}
	if s.ldflags != "" {
		buildArgs = append(buildArgs, "-ldflags="+s.ldflags)
	}
	steps := [][]string{
		{"mod", "init", "kubewire.invalid/testbin/" + s.name},
		append([]string{"mod", "edit", "-require=" + s.module}, s.replace...),
		{"mod", "tidy"},
		append(buildArgs, s.pkg),
	}
	for _, args := range steps {
		if err := runGo(ctx, mod, args...); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("installing binary: %w", err)
	}
	return nil
}

func runGo(ctx context.Context, dir string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false")
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
