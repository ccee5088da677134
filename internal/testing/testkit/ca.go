package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test. Its certificate and
// every certificate it issues are PEM files in the test's own directory.
type CA struct {
	// CertFile is the CA certificate, for a client's or a server's caFile.
	CertFile string
	// Cert is the CA certificate.
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Cert is a certificate the CA issued.
type Cert struct {
	// CertFile holds the chain (the certificate, then the CA's) and
	// KeyFile its unencrypted PKCS#8 key.
	CertFile, KeyFile string
	// TLS is the same certificate, for a tls.Config.
	TLS tls.Certificate
}

// NewCA creates a CA valid for a day and writes its certificate to ca.crt in
// a directory of the test's own.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = ca.write(t, "ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

// Pool is a pool holding only the CA, for a tls.Config's RootCAs or
// ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a server certificate named name for 127.0.0.1 and localhost
// and any further host names.
func (ca *CA) Server(t testing.TB, name string, hosts ...string) Cert {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, append([]string{"localhost"}, hosts...), []net.IP{net.IPv4(127, 0, 0, 1)})
}

// Client issues a client certificate whose common name is name.
func (ca *CA) Client(t testing.TB, name string) Cert {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, nil, nil)
}

// ServerTLS is a TLS 1.2+ server configuration presenting a Server
// certificate.
func (ca *CA) ServerTLS(t testing.TB, name string) *tls.Config {
	t.Helper()
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server(t, name).TLS}}
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) Cert {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("test CA: issuing %s: %v", name, err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	chainPEM := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})...)
	pair, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		t.Fatalf("test CA: %v", err)
	}
	return Cert{
		CertFile: ca.write(t, name+"-"+serialName(tmpl)+".crt", chainPEM),
		KeyFile:  ca.write(t, name+"-"+serialName(tmpl)+".key", keyPEM),
		TLS:      pair,
	}
}

func (ca *CA) write(t testing.TB, name string, b []byte) string {
	t.Helper()
	f := filepath.Join(ca.dir, name)
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatalf("test CA: %v", err)
	}
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("test CA: key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("test CA: serial: %v", err)
	}
	return n
}

func serialName(c *x509.Certificate) string { return c.SerialNumber.Text(36) }
