package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/logging"
	"github.com/kubewire/kubewire/internal/base/version"
)

// logger builds the process logger and routes client-go's logging into it,
// sampled, so there is one structured stream with one level (see
// internal/base/logging).
func (g *globalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	if g.logFormat != logging.FormatText && g.logFormat != logging.FormatJSON {
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", g.logFormat)}
	}
	return logging.New(w, logging.Options{Level: level, Format: g.logFormat})
}

// logStartup writes the line that says what this process talks to: the
// apiserver, the kubeconfig context, the config's cluster name and its
// sinks. It never holds a credential: the apiserver is written as scheme
// and host only, and sinks by name and type.
func logStartup(log *slog.Logger, rc *rest.Config, kubecontext string, cfg *config.Config) {
	sinks := make([]string, len(cfg.Sinks))
	for i, s := range cfg.Sinks {
		sinks[i] = s.Name + "(" + s.Type + ")"
	}
	log.Info("kubewire starting", "version", version.Version, "apiserver", apiserverHost(rc.Host),
		"context", kubecontext, "cluster", cfg.Cluster, "resources", len(cfg.Resources), "sinks", sinks)
}

// apiserverHost returns scheme://host[:port] of a rest.Config's Host,
// dropping any user info, path and query, which may hold credentials.
func apiserverHost(host string) string {
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return "(unparsable)"
	}
	return u.Scheme + "://" + u.Host
}
