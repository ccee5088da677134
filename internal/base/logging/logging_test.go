package logging_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kubewire/kubewire/internal/base/logging"
)

// lines returns the non-empty lines of buf.
func lines(buf *bytes.Buffer) []string {
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestDedupWritesARepeatingRecordOncePerIntervalAndCountsTheDroppedCopies(t *testing.T) {
	type step struct {
		after time.Duration // since the start
		level slog.Level
		msg   string
		err   string
	}
	cases := []struct {
		name  string
		steps []step
		want  []string // substrings of the lines written, in order
		not   []string // substrings no line may hold
	}{
		{"the same error every second for ten seconds is written once",
			[]step{{0, slog.LevelError, "Failed to watch", "refused"}, {time.Second, slog.LevelError, "Failed to watch", "refused"},
				{5 * time.Second, slog.LevelError, "Failed to watch", "refused"}, {9 * time.Second, slog.LevelError, "Failed to watch", "refused"}},
			[]string{"Failed to watch"}, []string{"repeated"}},
		{"after the interval the next copy is written with the count of the dropped ones",
			[]step{{0, slog.LevelError, "Failed to watch", "refused"}, {time.Second, slog.LevelError, "Failed to watch", "refused"},
				{2 * time.Second, slog.LevelError, "Failed to watch", "refused"}, {31 * time.Second, slog.LevelError, "Failed to watch", "refused"}},
			[]string{"Failed to watch", "err=refused repeated=2"}, nil},
		{"a copy after a quiet interval carries no count",
			[]step{{0, slog.LevelError, "Failed to watch", "refused"}, {40 * time.Second, slog.LevelError, "Failed to watch", "refused"}},
			[]string{"Failed to watch", "Failed to watch"}, []string{"repeated"}},
		{"messages that differ in an attribute are distinct",
			[]step{{0, slog.LevelError, "Failed to watch", "refused"}, {time.Second, slog.LevelError, "Failed to watch", "timeout"}},
			[]string{"err=refused", "err=timeout"}, nil},
		{"warnings are sampled too",
			[]step{{0, slog.LevelWarn, "watch ended", "eof"}, {time.Second, slog.LevelWarn, "watch ended", "eof"}},
			[]string{"watch ended"}, nil},
		{"info lines are sampled too",
			[]step{{0, slog.LevelInfo, "Warning: watch ended", "eof"}, {time.Second, slog.LevelInfo, "Warning: watch ended", "eof"}},
			[]string{"watch ended"}, nil},
		{"debug lines pass through",
			[]step{{0, slog.LevelDebug, "lease acquired", ""}, {time.Second, slog.LevelDebug, "lease acquired", ""}},
			[]string{"lease acquired", "lease acquired"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			d := logging.NewDedup(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), 30*time.Second, slog.LevelInfo)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var now time.Time
			d.SetClock(func() time.Time { return now })
			l := slog.New(d)
			for _, s := range tc.steps {
				now = start.Add(s.after)
				var args []any
				if s.err != "" {
					args = append(args, "err", s.err)
				}
				l.Log(t.Context(), s.level, s.msg, args...)
			}
			got := lines(&buf)
			if len(got) != len(tc.want) {
				t.Fatalf("wrote %d lines, want %d:\n%s", len(got), len(tc.want), buf.String())
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("line %d does not hold %q: %s", i, w, got[i])
				}
			}
			for _, n := range tc.not {
				if strings.Contains(buf.String(), n) {
					t.Errorf("output holds %q:\n%s", n, buf.String())
				}
			}
		})
	}
}

func TestDedupTellsApartLoggersWithDifferentAttributes(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(logging.NewDedup(slog.NewTextHandler(&buf, nil), time.Minute, slog.LevelWarn))
	for range 3 {
		l.With("reflector", "a").Error("Failed to watch")
		l.With("reflector", "b").Error("Failed to watch")
		l.WithGroup("g").Error("Failed to watch")
	}
	if got := lines(&buf); len(got) != 3 {
		t.Fatalf("wrote %d lines, want 3 (one per logger):\n%s", len(got), buf.String())
	}
}

func TestJSONLogsWriteDurationsAsSecondsAndTextLogsAsDurations(t *testing.T) {
	cases := []struct {
		format string
		check  func(t *testing.T, line string)
	}{
		{logging.FormatJSON, func(t *testing.T, line string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("not JSON: %v: %s", err, line)
			}
			if m["drained"] != 1.5 {
				t.Errorf("drained = %v (%T), want 1.5 seconds: %s", m["drained"], m["drained"], line)
			}
			if g, _ := m["g"].(map[string]any); g == nil || g["wait"] != 0.25 {
				t.Errorf("g.wait = %v, want 0.25 seconds: %s", m["g"], line)
			}
			if m["n"] != 7.0 {
				t.Errorf("a plain number changed: n = %v: %s", m["n"], line)
			}
		}},
		{logging.FormatText, func(t *testing.T, line string) {
			if !strings.Contains(line, "drained=1.5s") || !strings.Contains(line, "g.wait=250ms") {
				t.Errorf("text does not print durations as durations: %s", line)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := logging.New(&buf, logging.Options{Format: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			l.Info("kubewire stopped", "drained", 1500*time.Millisecond, slog.Group("g", "wait", 250*time.Millisecond), "n", 7)
			tc.check(t, strings.TrimSpace(buf.String()))
		})
	}
}

func TestUtilRuntimeErrorsAreLoggedOnceThroughTheSampledLogger(t *testing.T) {
	var buf bytes.Buffer
	if _, err := logging.New(&buf, logging.Options{Format: logging.FormatJSON}); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	for range 20 {
		utilruntime.HandleErrorWithContext(t.Context(), refused, "Failed to watch", "reflector", "configmaps")
	}
	utilruntime.HandleError(errors.New("something else"))
	got := lines(&buf)
	if len(got) != 2 {
		t.Fatalf("wrote %d lines, want 2 (each distinct error once):\n%s", len(got), buf.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(got[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["level"] != "ERROR" || first["msg"] != "Failed to watch" || first["reflector"] != "configmaps" ||
		first["err"] != refused.Error() || first["source"] != "client-go" {
		t.Errorf("the line lost what client-go reported: %s", got[0])
	}
}

func TestKlogErrorsAndWarningsAreSampled(t *testing.T) {
	var buf bytes.Buffer
	if _, err := logging.New(&buf, logging.Options{Format: logging.FormatText}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		klog.ErrorS(errors.New("forbidden"), "failed to renew lease")
		klog.Warning("watch of configmaps ended with: too old resource version")
	}
	klog.Flush()
	var errs, warns int
	for _, l := range lines(&buf) {
		switch {
		case strings.Contains(l, "failed to renew lease"):
			errs++
		case strings.Contains(l, "watch of configmaps ended"):
			warns++
		}
	}
	if errs != 1 || warns != 1 {
		t.Fatalf("errors %d, warnings %d; want 1 and 1:\n%s", errs, warns, buf.String())
	}
}
