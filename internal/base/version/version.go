// Package version says which build of kubewire is running.
//
// A release build sets the three variables at link time (`make release`
// and the Dockerfile do):
//
//	-ldflags "-X github.com/kubewire/kubewire/internal/base/version.Version=v1.2.3
//	          -X github.com/kubewire/kubewire/internal/base/version.Commit=<sha>
//	          -X github.com/kubewire/kubewire/internal/base/version.Date=<RFC 3339>"
//
// A build that does not (`go install ...@v1.2.3`, or `go build` in a clone)
// falls back to what the Go toolchain recorded in the binary: the module
// version, and the VCS revision and commit time when it built from a
// checkout with VCS stamping on.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is the release version, or "dev" for a build that has neither
// ldflags nor a module version.
var Version = "dev"

// Commit is the full git revision the binary was built from, with "-dirty"
// when the work tree had uncommitted changes; "" when unknown.
var Commit = ""

// Date is when the source was committed (RFC 3339), not when it was
// compiled, so that two builds of one commit are byte-for-byte equal; ""
// when unknown.
var Date = ""

// Unknown is what Info reports for a field no source could tell.
const Unknown = "unknown"

// Info describes the running binary. Its JSON form is what
// `kubewire version -o json` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

func init() {
	// Resolve once, before any package that imports this one reads
	// Version (metrics labels, the user agent, the startup log), so every
	// place names the same version.
	bi, _ := debug.ReadBuildInfo()
	info := resolve(Info{Version: Version, Commit: Commit, Date: Date}, bi)
	Version = info.Version
	if info.Commit != Unknown {
		Commit = info.Commit
	}
	if info.Date != Unknown {
		Date = info.Date
	}
}

// Get returns the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	info := resolve(Info{Version: Version, Commit: Commit, Date: Date}, bi)
	info.GoVersion = runtime.Version()
	info.Platform = runtime.GOOS + "/" + runtime.GOARCH
	return info
}

// resolve fills what the linker left unset from the toolchain's build
// information (bi may be nil), and whatever is still empty with Unknown.
func resolve(set Info, bi *debug.BuildInfo) Info {
	out := set
	if bi != nil {
		if (out.Version == "" || out.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			out.Version = bi.Main.Version
		}
		var revision, modified, vcsTime string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
		if out.Commit == "" && revision != "" {
			out.Commit = revision
			if modified == "true" {
				out.Commit += "-dirty"
			}
		}
		if out.Date == "" {
			out.Date = vcsTime
		}
	}
	if out.Version == "" {
		out.Version = "dev"
	}
	if out.Commit == "" {
		out.Commit = Unknown
	}
	if out.Date == "" {
		out.Date = Unknown
	}
	return out
}
