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

// OpenStream connects to the sink's servers with its TLS settings and
// credentials, and finds the JetStream stream that keeps its messages: the
// one the config provisions, or else the one that captures the sink's
// subjects. The caller closes the connection.
func OpenStream(ctx context.Context, c *Config) (*natsgo.Conn, jetstream.JetStream, string, error) {
	s, err := New("reader", c, sinks.Deps{})
	if err != nil {
		return nil, nil, "", err
	}
	sink := s.(*Sink)
	if sink.cfg.Mode != ModeJetStream {
		return nil, nil, "", ErrNoHistory
	}
	opts, err := sink.options()
	if err != nil {
		return nil, nil, "", err
	}
	nc, err := natsgo.Connect(strings.Join(sink.cfg.Servers, ","), opts...)
	if err != nil {
		return nil, nil, "", fmt.Errorf("nats: connect: %w", err)
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
