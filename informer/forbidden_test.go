package informer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/base/config"
)

func TestARefusalIsAnErrorOnlyOnceItHasLastedAMinute(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	var e episode
	for _, step := range []struct {
		name  string
		at    time.Duration
		error bool
	}{
		{"The first refusal is a warning.", 0, false},
		{"Retries within the minute stay warnings.", 30 * time.Second, false},
		{"Still refused after more than a minute is an error.", 61 * time.Second, true},
		{"Retries go on being errors.", 90 * time.Second, true},
		{"A refusal long after the last one starts a new episode.", 90*time.Second + episodeGap + time.Second, false},
	} {
		if got := e.lasted(t0.Add(step.at), forbiddenIsError); got != step.error {
			t.Errorf("%s lasted() = %v, want %v", step.name, got, step.error)
		}
	}
}

func TestAForbiddenWatchIsLoggedAsAWarningAtFirst(t *testing.T) {
	var buf bytes.Buffer
	w := NewWatcher(Options{Cluster: "c", Out: discardOutput{}, Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Resource: config.Resource{Version: "v1", Resource: "secrets", Namespaces: []string{"a", "b"}}})
	w.res = NewResource("c", w.gvr, "Secret", true)
	w.watchError(context.Background(), nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", nil))
	line := buf.String()
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "permission denied") || !strings.Contains(line, "namespaces=\"[a b]\"") {
		t.Errorf("log = %q, want one WARN line naming the namespaces", line)
	}
}

// The access check at start asks about watch only, so a refused list is
// first met by the informer's LIST: that resource must not hold readiness
// either (readiness skips a forbidden resource that has not synced).
func TestARefusedListBeforeTheFirstSyncMarksTheResourceForbidden(t *testing.T) {
	w := NewWatcher(Options{Cluster: "c", Out: discardOutput{}, Logger: slog.New(slog.DiscardHandler),
		Resource: config.Resource{Version: "v1", Resource: "secrets"}})
	w.res = NewResource("c", w.gvr, "Secret", true)
	w.setState(StateSyncing)
	w.watchError(context.Background(), nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", nil))
	if got := w.State(); got != StateForbidden {
		t.Errorf("state after a refused list = %q, want %q", got, StateForbidden)
	}
}
