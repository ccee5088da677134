package app

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
)

// DefaultProfilingAddress is where --profiling listens when it names no
// address: loopback only, since a profile can hold what redaction keeps
// out of events (see ServeProfiling).
const DefaultProfilingAddress = "127.0.0.1:6060"

// ServeProfiling serves net/http/pprof on a listener of its own at addr
// until ctx ends, never on the metrics address: a heap profile holds the
// informer cache's objects as they were read, which can include Secret
// values that redaction removes from events. The handlers are registered on
// a mux of their own, not on http.DefaultServeMux, so importing pprof
// exposes nothing elsewhere.
func ServeProfiling(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	serve(ctx, ln, mux, log, "profiling server stopped")
	return ln.Addr(), nil
}
