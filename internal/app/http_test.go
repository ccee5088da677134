package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/app"
	"github.com/kubewire/kubewire/internal/testcluster"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestReadinessFollowsInformerSyncAndMetricsAreServed(t *testing.T) {
	ns := namespace(t)
	group := unique("ready") + ".example.com"
	// The CRD is missing, so the widgets informer cannot sync: not ready.
	k := start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}
  - {group: %s, version: v1, resource: widgets, sinks: [out]}
`, ns, group), testcluster.AdminUser)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := app.ServeHTTP(ctx, "127.0.0.1:0", k.App.Ready, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	k.WaitFor(t, "the configmaps snapshot", completed("configmaps"))
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while a resource is unresolved, want 503", code)
	}
	installCRD(t, group)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := get(t, base+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz never became ready after the CRD was installed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, body := get(t, base+"/metrics")
	for _, m := range []string{`kubewire_informer_synced{resource="widgets.` + group + `"} 1`, "kubewire_events_published_total", "go_goroutines"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
}
