package cli

import (
	"context"

	"github.com/kubewire/kubewire/internal/app"
)

// SetRunApp makes `kubewire run` end as f says instead of running the app.
func SetRunApp(f func(*app.App, context.Context) (int, error)) (restore func()) {
	prev := runApp
	runApp = f
	return func() { runApp = prev }
}
