package metrics

import (
	"runtime"
	"testing"

	"github.com/kubewire/kubewire/internal/base/version"
)

func TestBuildInfoIsOneForTheRunningVersionAndGoRelease(t *testing.T) {
	got := Sum("kubewire_build_info", map[string]string{"version": version.Version, "goversion": runtime.Version()})
	if got != 1 {
		t.Fatalf("kubewire_build_info{version=%q,goversion=%q} = %v, want 1", version.Version, runtime.Version(), got)
	}
	if all := Sum("kubewire_build_info", nil); all != 1 {
		t.Fatalf("kubewire_build_info has %v series set, want exactly one", all)
	}
}
