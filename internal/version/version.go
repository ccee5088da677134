// Package version carries the build's version, set at link time with
// -ldflags "-X github.com/kubewire/kubewire/internal/version.Version=v1.2.3".
package version

// Version is the release version, or "dev" for an untagged build.
var Version = "dev"
