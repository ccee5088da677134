package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/internal/base/version"
)

// BuildInfo is 1, labelled with the running binary's version and the Go
// release it was built with, so that dashboards and alerts can tell which
// build a replica runs (join on it, or count versions during a rollout).
var BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubewire_build_info",
	Help: "Always 1, labelled with the kubewire version and the Go version it was built with.",
}, []string{"version", "goversion"})

func init() {
	BuildInfo.WithLabelValues(version.Version, runtime.Version()).Set(1)
	register(BuildInfo)
}
