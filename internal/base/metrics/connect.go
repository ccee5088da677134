package metrics

import "github.com/prometheus/client_golang/prometheus"

// SinkConnectFailures counts failed attempts of a sink to reach its broker,
// by a reason from a bounded set: auth (credentials refused), tls (the
// handshake or the certificate check failed), network (no answer) and other
// (a missing topic or stream, say). kubewire_sink_healthy says that a sink is
// down; this says why, so that an expired password is not mistaken for an
// outage. The adapters classify their own client library's errors.
var SinkConnectFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kubewire_sink_connect_failures_total",
	Help: "Failed attempts of a sink to connect, by sink and reason (auth, tls, network, other).",
}, []string{"sink", "reason"})

// Reasons of SinkConnectFailures.
const (
	ConnectAuth    = "auth"
	ConnectTLS     = "tls"
	ConnectNetwork = "network"
	ConnectOther   = "other"
)

func init() { register(SinkConnectFailures) }
