// Package nats is the sink that publishes CloudEvents to NATS: core NATS
// (at most once) or JetStream (at least once, deduplicated by Nats-Msg-Id).
//
// Messages follow the CloudEvents NATS protocol binding: binary mode (the
// default) puts every attribute in a percent-encoded ce- header and the data
// in the body; structured mode puts the JSON event in the body. Each event
// goes to the subject its object's template expands to (see Template and
// EscapeToken). docs/sinks/nats.md is the user's guide.
package nats

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
	"github.com/kubewire/kubewire/internal/secretfile"
	"github.com/kubewire/kubewire/internal/tlsfiles"
	"github.com/kubewire/kubewire/sinks"
)

// Type is the config `type` of this sink.
const Type = "nats"

// Spec is the NATS sink type.
var Spec = sinks.NewSpec(Type, schema, New)

// schema is the JSON Schema of the nats block, for the Helm chart.
//
//go:embed schema.json
var schema string

// Sink publishes to NATS. It is safe for the concurrent Writes of several
// dispatcher shards.
type Sink struct {
	name string
	cfg  Config
	tmpl *Template
	log  *slog.Logger

	mu sync.Mutex
	nc *natsgo.Conn
	// cur is nc, for the client's callbacks: they run on the client's own
	// goroutine and report only about the connection in use, not one that
	// a redial replaced.
	cur atomic.Pointer[natsgo.Conn]
	// up is the dispatcher's health callback (sinks.ConnectionNotifier).
	up atomic.Pointer[func(bool)]
	js jetstream.JetStream
	// kv is the key-value bucket of jetstream.kv, or nil.
	kv   jetstream.KeyValue
	done bool

	// kvWindows holds, per open snapshot, the bucket's last revision when
	// its started marker was written (see writeKV).
	kvMu      sync.Mutex
	kvWindows map[kvWindowKey]uint64

	// window holds one token per JetStream publish awaiting its PubAck,
	// across every shard: the bound that maxPending promises. A token is
	// returned by the ack callback, so a Write that gives up early cannot
	// leak window.
	window chan struct{}

	// pending maps each in-flight JetStream message to the Write waiting for
	// it. The PubAck callbacks of the jetstream context resolve it; that is
	// how one Write waits on many acknowledgements without a goroutine each.
	pendingMu sync.Mutex
	pending   map[*natsgo.Msg]waiter
}

type waiter struct {
	results chan<- result
	index   int
}

type result struct {
	index int
	ack   *jetstream.PubAck
	err   error
}

var (
	_ sinks.Sink               = (*Sink)(nil)
	_ sinks.ConnectionNotifier = (*Sink)(nil)
)

// NotifyConnection implements sinks.ConnectionNotifier: up(false) when the
// client loses its connection (it reconnects by itself, buffering core
// publishes meanwhile, so a Write may still succeed), up(true) once it is
// back or redialled.
func (s *Sink) NotifyConnection(up func(bool)) { s.up.Store(&up) }

// report passes a change of nc's connection state to the dispatcher, unless
// nc is no longer the sink's connection.
func (s *Sink) report(nc *natsgo.Conn, up bool) {
	if f := s.up.Load(); f != nil && nc == s.cur.Load() {
		(*f)(up)
	}
}

// New builds a NATS sink from its block, defaulted here for a block built in code. Nothing connects until Connect.
func New(name string, cfg *Config, deps sinks.Deps) (sinks.Sink, error) {
	c := cfg.Defaulted()
	tmpl, err := CompileTemplate(c.Subject)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		name:    name,
		cfg:     c,
		tmpl:    tmpl,
		log:     log.With("sink", name, "type", Type),
		pending: map[*natsgo.Msg]waiter{},

		kvWindows: map[kvWindowKey]uint64{},
	}
	if c.Mode == ModeJetStream {
		s.window = make(chan struct{}, c.JetStream.MaxPending)
	}
	return s, nil
}

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

// Write publishes events in order and reports each one's outcome (a
// sinks.BatchError names the failed ones): an event is acknowledged once
// the server has taken it, with a PubAck in JetStream mode, by a completed
// flush in core mode. With jetstream.kv, the events the stream took are
// then written to the bucket too (writeKV), and an event is acknowledged
// only once both have taken it.
func (s *Sink) Write(ctx context.Context, events []*event.Event) error {
	o := outcomes{n: len(events)}
	msgs := make([]*natsgo.Msg, len(events))
	for i, ev := range events {
		m, err := s.message(ev)
		if err != nil {
			// Retrying cannot change how an event encodes.
			o.fail(i, sinks.Permanent(fmt.Errorf("nats: event %s: %w", ev.ID(), err)))
			continue
		}
		msgs[i] = m
	}
	nc, js, err := s.conn(ctx)
	if err != nil {
		if o.be == nil {
			return err
		}
		o.failRest(0, err)
		return o.be
	}
	if js == nil {
		s.writeCore(ctx, nc, events, msgs, &o)
		return o.be.ErrorOrNil()
	}
	s.writeJetStream(ctx, js, events, msgs, &o)
	if s.cfg.JetStream.KV != nil {
		s.mu.Lock()
		kv := s.kv
		s.mu.Unlock()
		s.writeKV(ctx, js, kv, events, &o)
	}
	return o.be.ErrorOrNil()
}

// outcomes gathers the failures of one Write's events.
type outcomes struct {
	n  int
	be *sinks.BatchError
}

func (o *outcomes) fail(i int, err error) {
	if o.be == nil {
		o.be = sinks.NewBatchError(o.n)
	}
	o.be.Failed(i, err)
}

func (o *outcomes) failed(i int) bool { return o.be != nil && o.be.Err(i) != nil }

// failedBefore reports whether an event before the i-th failed.
func (o *outcomes) failedBefore(i int) bool {
	for j := range i {
		if o.failed(j) {
			return true
		}
	}
	return false
}

// failRest fails, with err, every event from the first-th on that has not
// failed already.
func (o *outcomes) failRest(first int, err error) {
	for i := first; i < o.n; i++ {
		if !o.failed(i) {
			o.fail(i, err)
		}
	}
}

// holdBack fails every acknowledged event that follows, in events, an
// event of its key that failed transiently: it may have overtaken that
// event (in the bucket, whose writes are not ordered per key), so it is
// written again after it.
func (o *outcomes) holdBack(events []*event.Event) {
	if o.be == nil {
		return
	}
	var failedKeys map[string]bool
	for i, ev := range events {
		k, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
		err := o.be.Err(i)
		switch {
		case err == nil && failedKeys[k]:
			o.fail(i, fmt.Errorf("nats: event %s follows a failed event of its key: %w", ev.ID(), sinks.ErrNotSent))
		case err != nil && !errors.Is(err, sinks.ErrPermanent):
			if failedKeys == nil {
				failedKeys = map[string]bool{}
			}
			failedKeys[k] = true
		}
	}
}

func (s *Sink) message(ev *event.Event) (*natsgo.Msg, error) {
	subject, err := s.tmpl.Subject(ev)
	if err != nil {
		return nil, err
	}
	var m *natsgo.Msg
	if s.cfg.ContentMode == config.ContentModeStructured {
		m, err = structuredMessage(subject, ev)
	} else {
		m, err = binaryMessage(subject, ev)
	}
	if err != nil {
		return nil, err
	}
	if s.cfg.Mode == ModeJetStream {
		m.Header[jetstream.MsgIDHeader] = []string{ev.ID()}
	}
	return m, nil
}

// writeCore publishes with core NATS. Core NATS has no acknowledgement: a
// successful flush means the server has read the messages, not that anyone
// received them (no subscriber, a slow consumer or a server crash all lose
// them silently). That is at most once, and this mode is for automation that
// prefers latency to completeness. What the client can see — a closed
// connection, a full reconnect buffer, a flush that does not complete — is
// reported, so the dispatcher retries it (possibly repeating messages that
// sat in the reconnect buffer; they keep their ids). A message larger than
// the server's max_payload is sent as its reference event instead; only a
// reference that is too large as well is refused, permanently and alone.
// A publish that fails otherwise is the connection's failure: it fails
// every event not refused, since those before it may sit in the reconnect
// buffer with no flush that could confirm them.
func (s *Sink) writeCore(ctx context.Context, nc *natsgo.Conn, events []*event.Event, msgs []*natsgo.Msg, o *outcomes) {
	for i, m := range msgs {
		if m == nil {
			continue // refused already
		}
		err := tooLarge(nc.PublishMsg(m))
		if errors.Is(err, sinks.ErrTooLarge) {
			mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
			ref, rerr := s.referenceMessage(events[i])
			if rerr != nil {
				o.fail(i, sinks.Permanent(fmt.Errorf("nats: publish event %s to %q: %w, and %w", events[i].ID(), m.Subject, err, rerr)))
				continue
			}
			if err = tooLarge(nc.PublishMsg(ref)); err == nil {
				s.sentReference(events[i], m)
				continue
			}
			m = ref
			if errors.Is(err, sinks.ErrTooLarge) {
				mOversized.WithLabelValues(s.name, "dropped").Inc()
				err = fmt.Errorf("even as a reference (%d bytes): %w", msgSize(ref), err)
			}
		}
		if err != nil {
			mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
			err = fmt.Errorf("nats: publish event %s to %q: %w", events[i].ID(), m.Subject, err)
			if errors.Is(err, sinks.ErrTooLarge) {
				o.fail(i, sinks.Permanent(err))
				continue
			}
			o.fail(i, err)
			o.failRest(0, fmt.Errorf("nats: not confirmed, since publishing event %s failed: %w", events[i].ID(), err))
			return
		}
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout.Duration)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
		o.failRest(0, fmt.Errorf("nats: flush %d messages: %w", len(msgs), err))
	}
}

// writeJetStream publishes a batch with asynchronous JetStream publishes and
// records in o each event that has no PubAck.
//
// Order. The stream stores messages in the order it receives them, and one
// connection delivers them in the order they were published. Many keys are
// in flight at once (that is the throughput), but each key has at most one
// message in flight: a key's next event is published only after the
// previous one's PubAck. So if an event fails, no later event of its key has
// been sent; they are reported failed with it (sinks.ErrNotSent), and when
// the dispatcher writes them again in order the key's events reach the
// stream in order again. Were two events of a key in flight together, the
// first could fail while the second is stored, and the retry would store
// the first after the second.
//
// A failure of one message (no stream captures its subject, a permission,
// an API error) holds back its key only. A failure that is the
// connection's (a timeout, a disconnect, a full buffer, anything unknown)
// stops the Write: nothing new is published, what is in flight is awaited
// (each resolves by ack, error, disconnect or the publish timeout), and
// every event not acknowledged is reported failed.
//
// Too large. A message refused as too large (by the client, against the
// server's max_payload, or by the stream, against its max_msg_size) is not a
// failure: its reference event takes its place, published next with the
// same Nats-Msg-Id. Nothing newer of its key was sent meanwhile, so the
// key's order holds. Only a reference that is refused too is a failure, a
// permanent one of that event alone: the key goes on.
func (s *Sink) writeJetStream(ctx context.Context, js jetstream.JetStream, events []*event.Event, msgs []*natsgo.Msg, o *outcomes) {
	// Each key's messages, in order; keys in order of first appearance.
	var keys []string
	queue := map[string][]int{}
	keyOf := func(i int) string { k, _ := events[i].Extensions()[encoding.ExtPartitionKey].(string); return k }
	for i := range events {
		if msgs[i] == nil {
			continue // refused already
		}
		k := keyOf(i)
		if _, ok := queue[k]; !ok {
			keys = append(keys, k)
		}
		queue[k] = append(queue[k], i)
	}
	ready := make([]int, 0, len(keys))
	for _, k := range keys {
		ready = append(ready, queue[k][0])
		queue[k] = queue[k][1:]
	}
	next := func(k string) {
		if q := queue[k]; len(q) > 0 {
			ready = append(ready, q[0])
			queue[k] = q[1:]
		}
	}

	// Buffered for every message, so the ack callbacks never block even
	// after this Write has returned. An event has at most one message
	// outstanding (its reference is published only after the full event's
	// result was taken), so one slot per event is enough.
	results := make(chan result, len(msgs))
	inFlight := 0
	acked := make([]bool, len(msgs))
	var stopped error // the connection's failure that stopped the Write
	// full holds the refused full message of an event whose reference
	// replaced it in msgs.
	full := map[int]*natsgo.Msg{}

	fail := func(i int, err error) {
		err = tooLarge(err)
		mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
		if _, ok := full[i]; !ok && errors.Is(err, sinks.ErrTooLarge) {
			ref, rerr := s.referenceMessage(events[i])
			if rerr == nil {
				full[i], msgs[i] = msgs[i], ref
				ready = append([]int{i}, ready...)
				return
			}
			err = fmt.Errorf("%w, and %w", err, rerr) // still too large: permanent
		}
		if _, ok := full[i]; ok && errors.Is(err, sinks.ErrTooLarge) {
			mOversized.WithLabelValues(s.name, "dropped").Inc()
			err = fmt.Errorf("even as a reference (%d bytes): %w", msgSize(msgs[i]), err)
		}
		ferr := fmt.Errorf("nats: event %s to %q: %w", events[i].ID(), msgs[i].Subject, err)
		k := keyOf(i)
		if errors.Is(err, sinks.ErrTooLarge) {
			o.fail(i, sinks.Permanent(ferr))
			next(k)
			return
		}
		o.fail(i, ferr)
		for _, j := range queue[k] {
			o.fail(j, fmt.Errorf("nats: event %s follows a failed event of its key: %w", events[j].ID(), sinks.ErrNotSent))
		}
		delete(queue, k)
		if stopped == nil && stopsWrite(err) {
			stopped = ferr
		}
	}
	handle := func(r result) {
		inFlight--
		if r.err != nil {
			fail(r.index, r.err)
			return
		}
		acked[r.index] = true
		if m, ok := full[r.index]; ok {
			s.sentReference(events[r.index], m)
		}
		if r.ack.Duplicate {
			mDuplicates.WithLabelValues(s.name).Inc()
		}
		next(keyOf(r.index))
	}
	// unresolved fails every event neither acknowledged nor failed yet.
	unresolved := func(err error) {
		for i := range events {
			if !acked[i] && !o.failed(i) {
				o.fail(i, err)
			}
		}
	}

	// A guard against waiting forever should an acknowledgement never be
	// resolved: the library times each publish out after publishTimeout, so
	// twice that without any progress means something is wrong.
	stall := time.NewTimer(2 * s.cfg.PublishTimeout.Duration)
	defer stall.Stop()
	for inFlight > 0 || len(ready) > 0 && stopped == nil {
		var admit chan struct{}
		if len(ready) > 0 && stopped == nil {
			admit = s.window
		}
		select {
		case admit <- struct{}{}:
			i := ready[0]
			ready = ready[1:]
			if err := s.publishAsync(js, msgs[i], results, i); err != nil {
				fail(i, err)
				continue
			}
			inFlight++
		case r := <-results:
			handle(r)
			stall.Reset(2 * s.cfg.PublishTimeout.Duration)
		case <-ctx.Done():
			unresolved(fmt.Errorf("nats: no PubAck yet: %w", ctx.Err()))
			return
		case <-stall.C:
			unresolved(fmt.Errorf("nats: no PubAck yet, and no progress for %s", 2*s.cfg.PublishTimeout.Duration))
			return
		}
	}
	if stopped != nil {
		unresolved(fmt.Errorf("nats: not published after %w: %w", stopped, sinks.ErrNotSent))
	}
}

// stopsWrite reports whether a failed publish is the connection's rather
// than its message's, so that publishing more in the same Write would
// only fail more.
func stopsWrite(err error) bool {
	switch reason(err) {
	case "no_stream", "permission", "api", "too_large":
		return false
	}
	return true
}

// publishAsync sends one message with a token of the window already taken.
// The waiter is registered first because the PubAck may arrive before
// PublishMsgAsync returns.
func (s *Sink) publishAsync(js jetstream.JetStream, m *natsgo.Msg, results chan<- result, i int) error {
	s.pendingMu.Lock()
	s.pending[m] = waiter{results: results, index: i}
	s.pendingMu.Unlock()
	mPendingAcks.WithLabelValues(s.name).Inc()
	if _, err := js.PublishMsgAsync(m); err != nil {
		// No callback follows a failed send: undo here.
		if s.resolve(m) != nil {
			<-s.window
		}
		return err
	}
	return nil
}

// resolve removes and returns the waiter of m, or nil if it was resolved
// already.
func (s *Sink) resolve(m *natsgo.Msg) *waiter {
	s.pendingMu.Lock()
	w, ok := s.pending[m]
	delete(s.pending, m)
	s.pendingMu.Unlock()
	if !ok {
		return nil
	}
	mPendingAcks.WithLabelValues(s.name).Dec()
	return &w
}

// onAck and onErr are the jetstream context's callbacks. They run on the
// library's goroutines (onErr for a timeout even under its lock), so they
// only hand the result over and never block.
func (s *Sink) onAck(_ jetstream.JetStream, m *natsgo.Msg, ack *jetstream.PubAck) {
	if w := s.resolve(m); w != nil {
		<-s.window
		w.results <- result{index: w.index, ack: ack}
	}
}

func (s *Sink) onErr(_ jetstream.JetStream, m *natsgo.Msg, err error) {
	if w := s.resolve(m); w != nil {
		<-s.window
		w.results <- result{index: w.index, err: err}
	}
}

// Close flushes what the client buffered and closes the connection.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	// A clean close is not a lost connection: the callbacks it triggers
	// report nothing (and log nothing) to the dispatcher.
	s.cur.Store(nil)
	if s.nc == nil || s.nc.IsClosed() {
		return nil
	}
	err := s.nc.FlushWithContext(ctx)
	s.nc.Close()
	if err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) {
		return fmt.Errorf("nats: flush on close: %w", err)
	}
	return nil
}

// referenceMessage is the message of ev's reference event
// (encoding.ReferenceEvent), which takes the place of ev when ev is too
// large. An error is permanent: retrying cannot make it smaller.
func (s *Sink) referenceMessage(ev *event.Event) (*natsgo.Msg, error) {
	ref, err := encoding.ReferenceEvent(ev)
	if err == nil {
		var m *natsgo.Msg
		if m, err = s.message(ref); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no reference event: %w", err)
}

// sentReference counts and logs an event that went out as its reference
// event because its full message was too large. The log names the event,
// never its data.
func (s *Sink) sentReference(ev *event.Event, full *natsgo.Msg) {
	mOversized.WithLabelValues(s.name, "reference").Inc()
	pk, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	s.log.Warn("event too large for NATS; sent a reference to the object instead",
		"id", ev.ID(), "partitionkey", pk, "subject", full.Subject, "bytes", msgSize(full))
}

// msgSize is about what a message counts against max_payload: its data and
// headers.
func msgSize(m *natsgo.Msg) int {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// isTooLarge recognises nats.go's refusals of a message as too large: the
// client's, against the server's max_payload, and the stream's, against its
// max_msg_size. What leaves the adapter carries sinks.ErrTooLarge instead
// (tooLarge).
func isTooLarge(err error) bool {
	if errors.Is(err, natsgo.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// tooLarge marks err with sinks.ErrTooLarge when NATS refused a message as
// too large, and returns every other err as it is.
func tooLarge(err error) error {
	if isTooLarge(err) && !errors.Is(err, sinks.ErrTooLarge) {
		return sinks.TooLarge(err)
	}
	return err
}

// reason is the bounded metric label of a publish error.
func reason(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case isTooLarge(err):
		return "too_large"
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, natsgo.ErrReconnectBufExceeded):
		return "buffer_full"
	case errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrNoServers):
		return "disconnected"
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no_stream"
	case errors.Is(err, natsgo.ErrPermissionViolation):
		return "permission"
	case errors.As(err, &apiErr):
		return "api"
	}
	return "other"
}
