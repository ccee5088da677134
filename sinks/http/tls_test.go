package httpsink_test

import (
	"context"
	"crypto/tls"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// connectErr connects s and returns the error, closing s when the test
// ends.
func connectErr(t *testing.T, cfg *httpsink.Config) error {
	t.Helper()
	s := newSink(t, cfg)
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Connect(ctx)
}

func tlsFailures(t *testing.T) float64 {
	return metrics.Sum("kubewire_sink_connect_failures_total", map[string]string{"sink": t.Name(), "reason": metrics.ConnectTLS})
}

// The receiver offers h2 and http/1.1; the sink asks for http/1.1 alone, on
// a connection of its own (see connTransport).
func TestHTTPSWithTheTestCAVerifiesTheReceiverOverHTTP1AndRefusesAnUnknownCA(t *testing.T) {
	ca := testkit.NewCA(t, "kubewire-test-ca")
	rcv := startReceiver(t, receiverOptions{TLS: ca.ServerTLS(t, "receiver")})

	t.Run("The CA in caFile verifies the receiver.", func(t *testing.T) {
		path := freshPath()
		s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, TLS: &httpsink.TLS{CAFile: ca.CertFile}})
		ctx := connect(t, s)
		if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); err != nil {
			t.Fatalf("Write over TLS: %v", err)
		}
		posts := rcv.Posts(path)
		if len(posts) != 1 || posts[0].ProtoMajor != 1 {
			t.Fatalf("posts = %+v; want one, over HTTP/1.1", posts)
		}
	})
	t.Run("The system roots do not know the test CA.", func(t *testing.T) {
		before := tlsFailures(t)
		err := connectErr(t, &httpsink.Config{URL: rcv.URL()})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("Connect = %v; want a certificate error", err)
		}
		if n := tlsFailures(t) - before; n != 1 {
			t.Errorf("kubewire_sink_connect_failures_total{reason=tls} grew by %v, want 1", n)
		}
	})
	t.Run("serverName is the name verified.", func(t *testing.T) {
		err := connectErr(t, &httpsink.Config{URL: rcv.URL(), TLS: &httpsink.TLS{CAFile: ca.CertFile, ServerName: "elsewhere.example"}})
		if err == nil || !strings.Contains(err.Error(), "elsewhere.example") {
			t.Fatalf("Connect = %v; want the certificate refused for elsewhere.example", err)
		}
		if err := connectErr(t, &httpsink.Config{URL: rcv.URL(), TLS: &httpsink.TLS{CAFile: ca.CertFile, ServerName: "localhost"}}); err != nil {
			t.Fatalf("Connect with serverName localhost: %v", err)
		}
	})
	t.Run("insecureSkipVerify skips verification.", func(t *testing.T) {
		if err := connectErr(t, &httpsink.Config{URL: rcv.URL(), TLS: &httpsink.TLS{InsecureSkipVerify: true}}); err != nil {
			t.Fatalf("Connect: %v", err)
		}
	})
	t.Run("A caFile that does not exist fails Connect naming the field.", func(t *testing.T) {
		err := connectErr(t, &httpsink.Config{URL: rcv.URL(), TLS: &httpsink.TLS{CAFile: t.TempDir() + "/missing.crt"}})
		if err == nil || !strings.Contains(err.Error(), "tls.caFile") {
			t.Fatalf("Connect = %v; want an error naming tls.caFile", err)
		}
	})
}

func TestMutualTLSPresentsTheClientCertificateAndPicksUpARenewedOne(t *testing.T) {
	ca := testkit.NewCA(t, "kubewire-test-ca")
	server := ca.ServerTLS(t, "receiver")
	server.ClientAuth = tls.RequireAndVerifyClientCert
	server.ClientCAs = ca.Pool()
	rcv := startReceiver(t, receiverOptions{TLS: server})

	t.Run("Without a client certificate the receiver refuses the handshake.", func(t *testing.T) {
		// Not checked: the reason it is counted with. Under TLS 1.3 the
		// receiver refuses the certificate after the client's handshake
		// is done, and when that alert reaches net/http's HTTP/2 client
		// first, it reports only that the connection could not be
		// established, without the alert, so the failure counts as other.
		err := connectErr(t, &httpsink.Config{URL: rcv.URL(), TLS: &httpsink.TLS{CAFile: ca.CertFile}})
		if err == nil {
			t.Fatal("Connect without a client certificate succeeded")
		}
	})

	t.Run("With one it is accepted, and a renewed one is used on the next connection.", func(t *testing.T) {
		first := ca.Client(t, "kubewire-1")
		dir := t.TempDir()
		certFile, keyFile := dir+"/tls.crt", dir+"/tls.key"
		install := func(c testkit.Cert) {
			for src, dst := range map[string]string{c.CertFile: certFile, c.KeyFile: keyFile} {
				b, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				// As the kubelet updates a Secret volume: a new file renamed
				// into place.
				if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(dst+".new", dst); err != nil {
					t.Fatal(err)
				}
			}
		}
		install(first)
		path := freshPath()
		s := newSink(t, &httpsink.Config{URL: rcv.URL() + path,
			TLS: &httpsink.TLS{CAFile: ca.CertFile, CertFile: certFile, KeyFile: keyFile}})
		ctx := connect(t, s)
		if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); err != nil {
			t.Fatalf("Write: %v", err)
		}
		install(ca.Client(t, "kubewire-2"))
		// The restart closes the sink's connection, so the next request
		// dials and shakes hands again.
		rcv.Restart(t)
		testkit.Eventually(t, "a request with the renewed certificate", func() bool {
			_ = s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 2))})
			posts := rcv.Posts(path)
			return posts[len(posts)-1].PeerCN == "kubewire-2"
		})
		if cn := rcv.Posts(path)[0].PeerCN; cn != "kubewire-1" {
			t.Errorf("the first request presented %q, want kubewire-1", cn)
		}
	})
}
