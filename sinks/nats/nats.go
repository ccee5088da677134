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
	"sync"
	"sync/atomic"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/internal/base/metrics"
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
	// mPending is mPendingAcks of this sink, looked up once: it moves
	// twice per message.
	mPending prometheus.Gauge
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
	// A sink built without the registry of sink types (a program that
	// uses this package alone) still exports its metrics.
	metrics.Register(cfg.Collectors()...)
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
		name:     name,
		cfg:      c,
		tmpl:     tmpl,
		log:      log.With("sink", name, "type", Type),
		pending:  map[*natsgo.Msg]waiter{},
		mPending: mPendingAcks.WithLabelValues(name),

		kvWindows: map[kvWindowKey]uint64{},
	}
	if c.Mode == ModeJetStream {
		s.window = make(chan struct{}, c.JetStream.MaxPending)
	}
	return s, nil
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
	// Every Write returned once its events were acknowledged (or failed
	// them), so only bytes the client still buffers can be lost.
	n, _ := s.nc.Buffered()
	if !s.nc.IsConnected() {
		// The server is out of reach: a flush could only wait out ctx.
		s.nc.Close()
		if n > 0 {
			return fmt.Errorf("nats: closed with %d bytes buffered and the server unreachable", n)
		}
		return nil
	}
	err := s.nc.FlushWithContext(ctx)
	if err != nil && n == 0 && !s.nc.IsConnected() {
		// The server went away between the check above and the flush's
		// PING, which now waits for a reconnect that will not come.
		// Nothing was buffered, so nothing was lost.
		err = nil
	}
	s.nc.Close()
	if err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) {
		return fmt.Errorf("nats: flush on close: %w", err)
	}
	return nil
}
