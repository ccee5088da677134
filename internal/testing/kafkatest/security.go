package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// Options say how StartWith sets a broker up.
type Options struct {
	// Props are added to (and override) the server properties.
	Props map[string]string
	// TLS adds a listener that speaks TLS and nothing else, at
	// Broker.SSLAddr.
	TLS bool
	// ClientAuth makes the TLS listener require a client certificate signed
	// by the broker's CA; Broker.IssueClientCert makes one.
	ClientAuth bool
	// SASL adds a SASL_SSL listener, at Broker.SASLSSLAddr, that accepts
	// Users with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN.
	SASL bool
	// Host is the IP address every listener binds to and advertises; empty
	// means 127.0.0.1. internal/testing/nodecluster's pods reach the host on its
	// bridge address, not on loopback.
	Host string
	// Users maps user names to passwords. Names and passwords are limited
	// to letters, digits, '-' and '_', because they are written into the
	// storage tool's --add-scram argument and a JAAS string, and neither
	// has a quoting rule worth relying on in a test.
	Users map[string]string
}

// listener is a secured listener besides PLAINTEXT and CONTROLLER.
type listener struct {
	name, protocol, addr string
}

// Listener names as they appear in server.properties. Per-listener settings
// are prefixed with the name in lower case.
const (
	tlsListener  = "TLS"
	saslListener = "SASL"
)

// secure prepares the certificates, listeners and credentials o asks for,
// and returns the server properties they need and the extra arguments of
// the storage format (SCRAM credentials live in the cluster metadata in
// KRaft, so they are written before the broker first starts).
func (b *Broker) secure(o Options) (map[string]string, []string, error) {
	if !o.TLS && !o.SASL {
		return nil, nil, nil
	}
	props := map[string]string{}
	ca, err := NewCA(filepath.Join(b.dir, "ca"), "kubewire test CA")
	if err != nil {
		return nil, nil, err
	}
	b.CAFile = ca.CertFile
	b.ca = ca
	keyPEM, chainPEM, err := ca.Issue("kafka broker", []string{"localhost"}, []net.IP{net.ParseIP(b.host)})
	if err != nil {
		return nil, nil, err
	}
	// The PEM keystore given inline: Kafka reads an unencrypted PKCS#8 key
	// from the property itself, while a PEM keystore file would need an
	// encrypted key and ssl.key.password. These apply to every listener
	// whose protocol uses TLS; PLAINTEXT and CONTROLLER ignore them.
	props["ssl.keystore.type"] = "PEM"
	props["ssl.keystore.key"] = string(keyPEM)
	props["ssl.keystore.certificate.chain"] = string(chainPEM)
	if o.TLS {
		l := listener{name: tlsListener, protocol: "SSL", addr: net.JoinHostPort(b.host, strconv.Itoa(testkit.FreePort(b.t)))}
		b.extra = append(b.extra, l)
		b.SSLAddr = l.addr
		if o.ClientAuth {
			prefix := "listener.name." + strings.ToLower(tlsListener) + "."
			props[prefix+"ssl.client.auth"] = "required"
			props[prefix+"ssl.truststore.type"] = "PEM"
			props[prefix+"ssl.truststore.certificates"] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
		}
	}
	var format []string
	if o.SASL {
		l := listener{name: saslListener, protocol: "SASL_SSL", addr: net.JoinHostPort(b.host, strconv.Itoa(testkit.FreePort(b.t)))}
		b.extra = append(b.extra, l)
		b.SASLSSLAddr = l.addr
		names := make([]string, 0, len(o.Users))
		for n := range o.Users {
			names = append(names, n)
		}
		sort.Strings(names)
		var plain strings.Builder
		plain.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
		for _, n := range names {
			pw := o.Users[n]
			if !simple(n) || !simple(pw) {
				return nil, nil, fmt.Errorf("kafkatest: user %q: names and passwords may hold only letters, digits, '-' and '_'", n)
			}
			for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
				format = append(format, "--add-scram", m+"=[name="+n+",password="+pw+"]")
			}
			fmt.Fprintf(&plain, " user_%s=%q", n, pw)
		}
		plain.WriteString(";")
		prefix := "listener.name." + strings.ToLower(saslListener) + "."
		props["sasl.enabled.mechanisms"] = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
		props[prefix+"scram-sha-256.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		props[prefix+"scram-sha-512.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		props[prefix+"plain.sasl.jaas.config"] = plain.String()
	}
	return props, format, nil
}

func simple(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
}

// escapeProperty writes v as a java.util.Properties value: backslashes
// doubled and line breaks as \n, so a PEM block stays one property.
func escapeProperty(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(v)
}

// CA is a certificate authority made for one test.
type CA struct {
	// CertFile is the CA certificate, PEM, for a client's caFile.
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// NewCA creates a self-signed CA valid for a day and writes its certificate
// to dir/ca.crt.
func NewCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	f := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	return &CA{CertFile: f, cert: cert, key: key}, nil
}

// IssueClientCert writes a client certificate and key signed by the
// broker's CA into dir and returns their paths. The broker must have been
// started with TLS.
func (b *Broker) IssueClientCert(dir, name string) (certFile, keyFile string, err error) {
	if b.ca == nil {
		return "", "", fmt.Errorf("kafkatest: the broker has no CA; start it with TLS")
	}
	keyPEM, chainPEM, err := b.ca.Issue(name, nil, nil)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, chainPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	return certFile, keyFile, nil
}

// Issue returns a certificate for the names and addresses, good for a
// server and a client, signed by the CA, as an unencrypted PKCS#8 key and a
// chain (leaf, then CA) in PEM.
func (ca *CA) Issue(name string, dns []string, ips []net.IP) (keyPEM, chainPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatest: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatest: certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatest: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	chainPEM = append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return keyPEM, chainPEM, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
