package cli

import (
	"context"

	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/verify"
)

// SetRunApp makes `kubewire run` end as f says instead of running the app.
func SetRunApp(f func(*app.App, context.Context) (int, error)) (restore func()) {
	prev := runApp
	runApp = f
	return func() { runApp = prev }
}

// SetRunVerify makes `kubewire verify` report what f returns instead of
// reading a sink.
func SetRunVerify(f func(context.Context, verify.Options) (*verify.Report, error)) (restore func()) {
	prev := runVerify
	runVerify = f
	return func() { runVerify = prev }
}
