package nats

// Connecting: dialling with TLS and credentials, provisioning the stream,
// and telling the dispatcher when the connection comes and goes.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/rawsock"
	"github.com/kubewire/kubewire/internal/base/secretfile"
	"github.com/kubewire/kubewire/internal/base/tlsfiles"
)

// Connect dials the servers and, in JetStream mode with a stream configured,
// creates or updates the stream.
func (s *Sink) Connect(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dialLocked(ctx)
}

// conn returns the live connection, dialling again if the client gave up
// reconnecting (maxReconnects ran out) so that the sink recovers when the
// servers come back rather than failing every later Write.
func (s *Sink) conn(ctx context.Context) (*natsgo.Conn, jetstream.JetStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, nil, fmt.Errorf("nats: sink is closed: %w", natsgo.ErrConnectionClosed)
	}
	if s.nc == nil || s.nc.IsClosed() {
		if err := s.dialLocked(ctx); err != nil {
			return nil, nil, err
		}
	}
	return s.nc, s.js, nil
}

// dialLocked connects; a failure is counted in
// kubewire_sink_connect_failures_total by reason.
func (s *Sink) dialLocked(ctx context.Context) error {
	err := s.dialOnceLocked(ctx)
	if err != nil {
		metrics.SinkConnectFailures.WithLabelValues(s.name, connectReason(err)).Inc()
	}
	return err
}

func (s *Sink) dialOnceLocked(ctx context.Context) error {
	opts, err := s.options()
	if err != nil {
		return err
	}
	nc, err := natsgo.Connect(strings.Join(s.cfg.Servers, ","), opts...)
	if err != nil {
		// The client's "authorization violation" does not say which
		// credential was refused; name the method (and the user or file,
		// which are not secrets), never the secret.
		return fmt.Errorf("nats: connect to %s%s: %w", strings.Join(s.cfg.Servers, ","), s.authMethod(), err)
	}
	var js jetstream.JetStream
	var kv jetstream.KeyValue
	if s.cfg.Mode == ModeJetStream {
		js, err = jetstream.New(nc,
			// Our window is the real bound; the library's must not be
			// smaller, or it would stall publishes we already admitted.
			jetstream.WithPublishAsyncMaxPending(cap(s.window)),
			jetstream.WithPublishAsyncTimeout(s.cfg.PublishTimeout.Duration),
			jetstream.WithPublishAsyncAckHandler(s.onAck),
			jetstream.WithPublishAsyncErrHandler(s.onErr),
		)
		if err != nil {
			nc.Close()
			return fmt.Errorf("nats: jetstream: %w", err)
		}
		if st := s.cfg.JetStream.Stream; st != nil {
			if err := provision(ctx, js, st, s.cfg.PublishTimeout.Duration); err != nil {
				nc.Close()
				return err
			}
		}
		if c := s.cfg.JetStream.KV; c != nil {
			if kv, err = openKV(ctx, js, c, s.cfg.PublishTimeout.Duration); err != nil {
				nc.Close()
				return err
			}
		}
	}
	if s.nc != nil {
		s.nc.Close()
	}
	s.nc, s.js, s.kv = nc, js, kv
	s.cur.Store(nc)
	s.report(nc, true)
	return nil
}

func provision(ctx context.Context, js jetstream.JetStream, st *Stream, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	storage := jetstream.FileStorage
	if st.Storage == StorageMemory {
		storage = jetstream.MemoryStorage
	}
	sc := jetstream.StreamConfig{
		Name:       st.Name,
		Subjects:   st.Subjects,
		Storage:    storage,
		Replicas:   st.Replicas,
		MaxAge:     st.MaxAge.Duration,
		MaxBytes:   -1,
		Duplicates: st.DuplicateWindow.Duration,
	}
	if st.MaxBytes > 0 {
		sc.MaxBytes = st.MaxBytes
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("nats: create or update stream %q: %w", st.Name, err)
	}
	return nil
}

// options turns the config into client options. Secrets are read here, from
// their files or environment variables, so a rotated secret takes effect on
// the next dial; they are never logged, and errors name only where they
// were looked for.
func (s *Sink) options() ([]natsgo.Option, error) {
	c := s.cfg
	opts := []natsgo.Option{
		natsgo.Name("kubewire/" + s.name),
		natsgo.MaxReconnects(*c.MaxReconnects),
		natsgo.ReconnectWait(c.ReconnectWait.Duration),
		natsgo.ReconnectBufSize(c.ReconnectBufferBytes),
		natsgo.Timeout(c.ConnectTimeout.Duration),
		// Raw system calls on the socket (internal/base/rawsock): with the
		// watch's reads raw as well, a publish and its flush's PONG no
		// longer wake sysmon for every event. nats.go layers TLS over the
		// dialed connection, and gives a custom dialer no timeout of its
		// own, so the connect timeout is the dialer's.
		natsgo.SetCustomDialer(&rawsock.Dialer{Dialer: net.Dialer{Timeout: c.ConnectTimeout.Duration}}),
		natsgo.DisconnectErrHandler(func(nc *natsgo.Conn, err error) {
			mConnectionEvents.WithLabelValues(s.name, "disconnected").Inc()
			s.report(nc, false)
			if err != nil {
				s.log.Warn("nats: disconnected", "err", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			mConnectionEvents.WithLabelValues(s.name, "reconnected").Inc()
			s.report(nc, true)
			s.log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		natsgo.ClosedHandler(func(nc *natsgo.Conn) {
			mConnectionEvents.WithLabelValues(s.name, "closed").Inc()
			// Reconnects ran out: down until a Write dials again.
			s.report(nc, false)
		}),
		// Asynchronous errors (a publish permission violation, say) are the
		// only sign of a core publish that the server dropped.
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
			s.log.Error("nats: asynchronous error", "err", err)
		}),
	}
	if tlsOpt, err := s.tlsOption(); err != nil {
		return nil, err
	} else if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	if a := c.Auth; a != nil {
		switch {
		case a.CredsFile != "":
			if _, err := os.Stat(a.CredsFile); err != nil {
				return nil, fmt.Errorf("nats: auth.credsFile: %w", err)
			}
			opts = append(opts, natsgo.UserCredentials(a.CredsFile))
		case a.NkeySeedFile != "":
			o, err := natsgo.NkeyOptionFromSeed(a.NkeySeedFile)
			if err != nil {
				return nil, fmt.Errorf("nats: auth.nkeySeedFile %s: %w", a.NkeySeedFile, err)
			}
			opts = append(opts, o)
		case a.User != "":
			pw, err := secret("auth.passwordFile", a.PasswordFile, "auth.passwordEnv", a.PasswordEnv)
			if err != nil {
				return nil, err
			}
			opts = append(opts, natsgo.UserInfo(a.User, pw))
		case a.TokenFile != "" || a.TokenEnv != "":
			tok, err := secret("auth.tokenFile", a.TokenFile, "auth.tokenEnv", a.TokenEnv)
			if err != nil {
				return nil, err
			}
			opts = append(opts, natsgo.Token(tok))
		}
	}
	return opts, nil
}

// authMethod describes, for errors, how the sink authenticates.
func (s *Sink) authMethod() string {
	a := s.cfg.Auth
	switch {
	case a == nil:
		return ""
	case a.CredsFile != "":
		return " with the creds file " + a.CredsFile
	case a.NkeySeedFile != "":
		return " with the nkey seed file " + a.NkeySeedFile
	case a.User != "":
		return fmt.Sprintf(" as user %q", a.User)
	case a.TokenFile != "" || a.TokenEnv != "":
		return " with a token"
	}
	return ""
}

// connectReason sorts a connect error into the reasons of
// kubewire_sink_connect_failures_total.
func connectReason(err error) string {
	for _, auth := range []error{natsgo.ErrAuthorization, natsgo.ErrAuthExpired, natsgo.ErrAuthRevoked, natsgo.ErrAccountAuthExpired} {
		if errors.Is(err, auth) {
			return metrics.ConnectAuth
		}
	}
	if tlsfiles.IsTLSError(err) ||
		errors.Is(err, natsgo.ErrSecureConnRequired) || errors.Is(err, natsgo.ErrSecureConnWanted) {
		return metrics.ConnectTLS
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, natsgo.ErrNoServers) || errors.Is(err, context.DeadlineExceeded) {
		return metrics.ConnectNetwork
	}
	return metrics.ConnectOther
}

// secret reads a secret from a file (trailing newline removed) or an
// environment variable. The error never includes the value.
func secret(fileField, file, envField, env string) (string, error) {
	if file != "" {
		v, err := secretfile.Read(fileField, file)
		if err != nil {
			return "", fmt.Errorf("nats: %w", err)
		}
		if v == "" {
			return "", fmt.Errorf("nats: %s: %s is empty", fileField, file)
		}
		return v, nil
	}
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return "", fmt.Errorf("nats: %s: environment variable %s is not set or empty", envField, env)
	}
	return v, nil
}

func (s *Sink) tlsOption() (natsgo.Option, error) {
	t := s.cfg.TLS
	wantTLS := t != nil
	for _, u := range s.cfg.Servers {
		wantTLS = wantTLS || strings.HasPrefix(u, "tls://")
	}
	if !wantTLS {
		return nil, nil
	}
	var f tlsfiles.Files
	if t != nil {
		f = tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
	}
	tc, err := tlsfiles.Config("nats", f)
	if err != nil {
		return nil, err
	}
	return natsgo.Secure(tc), nil
}
