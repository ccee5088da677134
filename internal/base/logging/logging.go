// Package logging builds kubewire's process logger: one slog stream, text
// or JSON, into which client-go's own logging (klog) and its error reports
// (k8s.io/apimachinery/pkg/util/runtime) are routed, sampled so that an
// error client-go reports on every backoff step is written once per
// interval, not once per step.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// Formats of New.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// DefaultRepeatInterval is how often New's client-go stream writes one
// distinct line while it keeps repeating.
const DefaultRepeatInterval = 30 * time.Second

// Options configure New.
type Options struct {
	Level  slog.Level
	Format string // FormatText or FormatJSON
	// RepeatInterval bounds how often one repeating client-go line is
	// written; DefaultRepeatInterval when zero.
	RepeatInterval time.Duration
}

// New returns the process logger writing to w, and routes client-go's
// logging into it: klog through klog.SetSlogLogger, and the errors
// client-go hands to utilruntime.HandleError ("Unhandled Error"), both
// through one Dedup, so each distinct line at info level or above is
// written at most once per RepeatInterval (klog's warnings reach slog at
// info level, as logr has no warning level). Debug lines (klog's -v
// levels) are not sampled. The returned logger itself is not sampled:
// kubewire's own retry loops already choose which attempts to log.
func New(w io.Writer, opt Options) (*slog.Logger, error) {
	ho := &slog.HandlerOptions{Level: opt.Level}
	var h slog.Handler
	switch opt.Format {
	case FormatText:
		h = slog.NewTextHandler(w, ho)
	case FormatJSON:
		ho.ReplaceAttr = DurationSeconds
		h = slog.NewJSONHandler(w, ho)
	default:
		return nil, fmt.Errorf("unknown log format %q", opt.Format)
	}
	interval := opt.RepeatInterval
	if interval <= 0 {
		interval = DefaultRepeatInterval
	}
	l := slog.New(h)
	clientGo := slog.New(NewDedup(h, interval, slog.LevelInfo))
	klog.SetSlogLogger(clientGo)
	routeUtilRuntime(clientGo)
	return l, nil
}

// DurationSeconds is a slog ReplaceAttr that writes a time.Duration as a
// float number of seconds, the unit of Prometheus and of most log
// pipelines, instead of slog's JSON default of integer nanoseconds.
func DurationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}

var (
	routeOnce     sync.Once
	unhandledTo   atomic.Pointer[slog.Logger]
	unhandledName = "client-go"
)

// routeUtilRuntime makes utilruntime's error reports go to l. It replaces
// utilruntime's first handler, which logs through klog with no sampling
// (its second, a 1ms rate limit, stays). The handler list is changed once
// per process; later calls only change the logger, so a test that builds
// several loggers never races with a client-go goroutine reading the list.
func routeUtilRuntime(l *slog.Logger) {
	unhandledTo.Store(l)
	routeOnce.Do(func() {
		handlers := []utilruntime.ErrorHandler{handleUnhandled}
		if len(utilruntime.ErrorHandlers) > 1 {
			// [0] is utilruntime's logError; TestUtilRuntimeErrorsAreLoggedOnce
			// fails if an upgrade changes that.
			handlers = append(handlers, utilruntime.ErrorHandlers[1:]...)
		}
		utilruntime.ErrorHandlers = handlers
	})
}

func handleUnhandled(ctx context.Context, err error, msg string, keysAndValues ...any) {
	l := unhandledTo.Load()
	if l == nil {
		return
	}
	args := make([]any, 0, len(keysAndValues)+4)
	args = append(args, "source", unhandledName)
	if err != nil {
		args = append(args, "err", err)
	}
	args = append(args, keysAndValues...)
	l.Log(ctx, slog.LevelError, msg, args...)
}
