package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolveFillsWhatTheLinkerLeftUnsetFromTheBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/kubewire/kubewire", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-23T19:47:13Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	dirty := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/kubewire/kubewire", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name string
		set  Info
		bi   *debug.BuildInfo
		want Info
	}{
		{
			name: "ldflags values win over the build info",
			set:  Info{Version: "v9.9.9", Commit: "fff", Date: "2030-01-01T00:00:00Z"},
			bi:   stamped,
			want: Info{Version: "v9.9.9", Commit: "fff", Date: "2030-01-01T00:00:00Z"},
		},
		{
			name: "a go install of a tagged module reports the module version and the VCS stamp",
			set:  Info{Version: "dev"},
			bi:   stamped,
			want: Info{Version: "v1.4.0", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-11-23T19:47:13Z"},
		},
		{
			name: "a build of a modified checkout marks the commit dirty and keeps dev",
			set:  Info{Version: "dev"},
			bi:   dirty,
			want: Info{Version: "dev", Commit: "abc-dirty", Date: Unknown},
		},
		{
			name: "without build info every unset field is unknown",
			set:  Info{Version: ""},
			bi:   nil,
			want: Info{Version: "dev", Commit: Unknown, Date: Unknown},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolve(tt.set, tt.bi); got != tt.want {
				t.Errorf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGetNamesTheRunningGoReleaseAndPlatform(t *testing.T) {
	info := Get()
	if info.GoVersion != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", info.GoVersion, runtime.Version())
	}
	if want := runtime.GOOS + "/" + runtime.GOARCH; info.Platform != want {
		t.Errorf("Platform %q, want %q", info.Platform, want)
	}
	if info.Version == "" || info.Commit == "" || info.Date == "" {
		t.Errorf("Get left a field empty: %+v", info)
	}
}
