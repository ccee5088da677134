package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
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
	before := scrape(t, base)
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), configMap(ns, "counted", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.WaitFor(t, "the new object", has("configmaps/"+ns+"/counted", "added"))
	// The stdout sink has the event before the dispatcher counts it as
	// published: poll the scrape rather than read it once.
	moved := []string{
		`kubewire_events_observed_total{resource="configmaps",type="added"}`,
		`kubewire_events_published_total{resource="configmaps",sink="out",type="added"}`,
		`kubewire_event_lag_seconds_count{sink="out"}`,
		`kubewire_publish_duration_seconds_count{sink="out"}`,
	}
	var after map[string]float64
	testkit.Eventually(t, "the metrics of the new object's event", func() bool {
		after = scrape(t, base)
		for _, m := range moved {
			if after[m] <= before[m] {
				return false
			}
		}
		return true
	}, func() string {
		var still []string
		for _, m := range moved {
			if after[m] <= before[m] {
				still = append(still, fmt.Sprintf("%s: %v -> %v", m, before[m], after[m]))
			}
		}
		return "did not move: " + strings.Join(still, "; ")
	})
	if after[`kubewire_informer_synced{resource="widgets.`+group+`"}`] != 1 || after["go_goroutines"] == 0 {
		t.Errorf("/metrics lacks informer_synced for widgets or the Go collector")
	}
	if after[`kubewire_snapshot_duration_seconds_count{resource="configmaps"}`] == 0 {
		t.Errorf("kubewire_snapshot_duration_seconds has no observation for configmaps")
	}
}

// scrape reads /metrics into "name{labels}" -> value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	_, body := get(t, base+"/metrics")
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m
}
