package httpsink

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"

	"github.com/kubewire/kubewire/internal/base/tlsfiles"
)

// tlsConfig is the client TLS configuration of an https:// sink. The CA
// file is read once, when the sink connects. The client certificate is read
// again on a new connection's handshake when its files changed: HTTP
// connections come and go all the time, so a certificate that cert-manager
// renews is picked up without a restart, while kafka and nats pick it up
// on their next reconnect.
func tlsConfig(t *TLS) (*tls.Config, error) {
	f := tlsfiles.Files{}
	if t != nil {
		f = tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	tc, err := tlsfiles.Config("http", f)
	if err != nil {
		return nil, err
	}
	if len(tc.Certificates) == 1 {
		r := &clientCert{certFile: t.CertFile, keyFile: t.KeyFile, cert: &tc.Certificates[0]}
		if r.certInfo, err = os.Stat(t.CertFile); err != nil {
			return nil, fmt.Errorf("http: tls.certFile: %w", err)
		}
		if r.keyInfo, err = os.Stat(t.KeyFile); err != nil {
			return nil, fmt.Errorf("http: tls.keyFile: %w", err)
		}
		tc.Certificates = nil
		tc.GetClientCertificate = r.get
	}
	return tc, nil
}

// clientCert is the client certificate, reloaded when its files change.
type clientCert struct {
	certFile, keyFile string

	mu                sync.Mutex
	cert              *tls.Certificate
	certInfo, keyInfo os.FileInfo
}

// get returns the current certificate. While the files are being replaced
// the certificate and the key may not match for a moment, or one may be
// missing; the last good pair is used until both are readable and agree.
func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci, err := os.Stat(c.certFile)
	if err != nil {
		return c.cert, nil
	}
	ki, err := os.Stat(c.keyFile)
	if err != nil {
		return c.cert, nil
	}
	if sameFile(ci, c.certInfo) && sameFile(ki, c.keyInfo) {
		return c.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return c.cert, nil
	}
	c.cert, c.certInfo, c.keyInfo = &pair, ci, ki
	return c.cert, nil
}

// sameFile reports whether a and b describe the same version of a file.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}
