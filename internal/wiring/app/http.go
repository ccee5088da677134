package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kubewire/kubewire/internal/base/metrics"
)

// ServeHTTP serves /metrics, /healthz and /readyz on addr until ctx ends.
// It returns the address actually bound (addr may use port 0).
//
// /healthz answers 200 while the process runs. /readyz answers 200 once
// ready() holds: every informer synced and every sink healthy. It cannot
// say why it is not ready; ServeHTTPReadiness can.
func ServeHTTP(ctx context.Context, addr string, ready func() bool, log *slog.Logger) (net.Addr, error) {
	return ServeHTTPReadiness(ctx, addr, func() Readiness { return Readiness{Ready: ready()} }, log)
}

// ServeHTTPReadiness is ServeHTTP with a /readyz that says why: while
// status() is not ready it answers 503 with the Readiness as JSON, naming
// each resource not synced and each sink not healthy. When ready it answers
// 200 "ok".
func ServeHTTPReadiness(ctx context.Context, addr string, status func() Readiness, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/readyz", ReadyzHandler(status))
	serve(ctx, ln, mux, log, "metrics server stopped")
	return ln.Addr(), nil
}

// serve serves mux on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener, mux *http.ServeMux, log *slog.Logger, stopped string) {
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(stopped, "err", err)
		}
	}()
}

// ReadyzHandler answers 200 "ok" while status() is ready, and otherwise 503
// with the Readiness as JSON.
func ReadyzHandler(status func() Readiness) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r := status()
		if r.Ready && len(r.DiscoveryFailed) == 0 && len(r.Unavailable) == 0 && len(r.DiscoveredForbidden) == 0 {
			_, _ = w.Write([]byte("ok\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Ready {
			// Ready, but some of what discover entries select is not
			// streaming: say which, without failing the probe.
			_ = json.NewEncoder(w).Encode(r)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(r)
	})
}
