package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/wiring/app"
)

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Profiles are served on a listener of their own, and only there: the
// metrics address, which Prometheus and the kubelet reach, never serves them.
func TestProfilesAreServedOnTheirOwnListenerAndNotOnTheMetricsOne(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	prof, err := app.ServeProfiling(ctx, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := getBody(t, "http://"+prof.String()+"/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("GET /debug/pprof/heap on the profiling listener: %d %.80q", code, body)
	}
	ready := func() app.Readiness { return app.Readiness{Ready: true} }
	met, err := app.ServeHTTPReadiness(ctx, "127.0.0.1:0", ready, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap"} {
		if code, _ := getBody(t, "http://"+met.String()+path); code != http.StatusNotFound {
			t.Errorf("GET %s on the metrics listener: %d, want 404", path, code)
		}
	}
	if app.DefaultProfilingAddress != "127.0.0.1:6060" {
		t.Errorf("bare --profiling listens on %s; it must stay on loopback", app.DefaultProfilingAddress)
	}
}
