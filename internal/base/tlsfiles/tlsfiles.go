// Package tlsfiles builds a client tls.Config from the PEM files a sink's
// config names, with errors that name the setting at fault. Files are read on
// every call, so a rotated certificate takes effect on the next connect.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// Files are the TLS settings common to every sink.
type Files struct {
	CAFile, CertFile, KeyFile string
	ServerName                string
	InsecureSkipVerify        bool
}

// Config returns a TLS 1.2+ client config. prefix ("kafka", "nats") starts
// every error message.
func Config(prefix string, f Files) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName, InsecureSkipVerify: f.InsecureSkipVerify}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s: tls.caFile: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: tls.caFile %s holds no PEM certificate", prefix, f.CAFile)
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: tls.certFile/keyFile: %w", prefix, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// IsTLSError reports whether err comes from the TLS handshake or
// certificate verification, so both sinks count it as reason "tls".
func IsTLSError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		alert     tls.AlertError
	)
	if errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header) || errors.As(err, &alert) {
		return true
	}
	return IsPeerAlert(err)
}

// IsPeerAlert reports whether the other side ended the TLS handshake with
// an alert, as a server does that requires a client certificate and got
// none or one it does not trust.
func IsPeerAlert(err error) bool {
	// Over TCP, crypto/tls reports a received alert as a net.OpError with
	// this Op; tls.AlertError is only used with QUIC.
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}
