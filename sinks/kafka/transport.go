package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/rawsock"
	"github.com/kubewire/kubewire/internal/base/secretfile"
	"github.com/kubewire/kubewire/internal/base/tlsfiles"
)

// newTransport turns the config into a kafka-go Transport. The SASL password
// is read here, from its file or environment variable; it is never logged
// and errors name only where it was looked for.
func (s *Sink) newTransport() (*kafkago.Transport, error) {
	tr := &kafkago.Transport{
		// kafka-go's reads and writes of package net wake the runtime's
		// sysmon thread after every idle spell, which at a trickle of events
		// is on every produce request and its answer; raw system calls do
		// not (internal/base/rawsock). Every connection of the sink's comes from
		// here (produce, metadata, topic creation, the health probe), and
		// kafka-go layers TLS and SASL over it. DialTimeout bounds the dial
		// through its context.
		Dial:        (&rawsock.Dialer{}).DialContext,
		ClientID:    s.cfg.ClientID,
		DialTimeout: s.cfg.DialTimeout.Duration,
		// Leader changes are noticed within this; the default is 6s.
		MetadataTTL: 2 * time.Second,
	}
	if t := s.cfg.TLS; t != nil {
		tc, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		tr.TLS = tc
	}
	if sc := s.cfg.SASL; sc != nil {
		m, err := saslMechanism(sc)
		if err != nil {
			return nil, err
		}
		tr.SASL = m
	}
	return tr, nil
}

func tlsConfig(t *TLS) (*tls.Config, error) {
	return tlsfiles.Config("kafka", tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify})
}

func saslMechanism(c *SASL) (sasl.Mechanism, error) {
	var password string
	switch {
	case c.PasswordFile != "":
		v, err := secretfile.Read("sasl.passwordFile", c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		password = v
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("kafka: sasl.passwordEnv: environment variable %s is not set", c.PasswordEnv)
		}
		password = v
	}
	switch c.Mechanism {
	case SASLPlain:
		return plain.Mechanism{Username: c.Username, Password: password}, nil
	case SASLScramSHA256, SASLScramSHA512:
		algo := scram.SHA256
		if c.Mechanism == SASLScramSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.Username, password)
		if err != nil {
			return nil, fmt.Errorf("kafka: sasl %s: %w", c.Mechanism, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka: unknown sasl mechanism %q", c.Mechanism)
}

// connectReason sorts a Connect error into the reasons of
// kubewire_sink_connect_failures_total.
func connectReason(err error) string {
	for _, auth := range []error{kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism,
		kafkago.IllegalSASLState, kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed} {
		if errors.Is(err, auth) {
			return metrics.ConnectAuth
		}
	}
	if tlsfiles.IsTLSError(err) {
		return metrics.ConnectTLS
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return metrics.ConnectNetwork
	}
	return metrics.ConnectOther
}
