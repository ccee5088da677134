package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/sinks"
)

// ErrNoHistory is returned for a core NATS sink: it keeps nothing to read
// back.
var ErrNoHistory = errors.New("nats: core NATS keeps no history to read; only a jetstream sink can be read back")

// Dial connects to the sink's servers with its TLS settings and
// credentials, as the sink does, whatever its mode. The caller closes the
// connection.
func Dial(c *Config) (*natsgo.Conn, error) {
	nc, _, err := dial(c)
	return nc, err
}

func dial(c *Config) (*natsgo.Conn, *Sink, error) {
	s, err := New("reader", c, sinks.Deps{})
	if err != nil {
		return nil, nil, err
	}
	sink := s.(*Sink)
	opts, err := sink.options()
	if err != nil {
		return nil, nil, err
	}
	nc, err := natsgo.Connect(strings.Join(sink.cfg.Servers, ","), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("nats: connect: %w", err)
	}
	return nc, sink, nil
}

// OpenStream connects to the sink's servers with its TLS settings and
// credentials, and finds the JetStream stream that keeps its messages: the
// one the config provisions, or else the one that captures the sink's
// subjects. The caller closes the connection.
func OpenStream(ctx context.Context, c *Config) (*natsgo.Conn, jetstream.JetStream, string, error) {
	if c.Defaulted().Mode != ModeJetStream {
		return nil, nil, "", ErrNoHistory
	}
	nc, sink, err := dial(c)
	if err != nil {
		return nil, nil, "", err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, "", fmt.Errorf("nats: jetstream: %w", err)
	}
	if st := sink.cfg.JetStream.Stream; st != nil {
		return nc, js, st.Name, nil
	}
	subject := StreamSubject(sink.cfg.Subject)
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		nc.Close()
		return nil, nil, "", fmt.Errorf("nats: no stream captures %s: %w", subject, err)
	}
	return nc, js, name, nil
}
