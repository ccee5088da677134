package testkit_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// fatalRecorder is a testing.TB whose Fatal is recorded instead of ending
// the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatal(args ...any) { f.msg = fmt.Sprint(args...) }
func (f *fatalRecorder) Helper()           {}

func TestWithinFailsNamingWhatItWaitedForAndTheDetailOnceTheDeadlinePasses(t *testing.T) {
	f := &fatalRecorder{TB: t}
	testkit.Within(f, 30*time.Millisecond, "the moon", func() bool { return false }, func() string { return "still waxing" })
	if want := "timed out after 30ms waiting for the moon: still waxing"; f.msg != want {
		t.Fatalf("Within failed with %q, want %q", f.msg, want)
	}
	f.msg = ""
	n := 0
	testkit.Within(f, time.Minute, "the third check", func() bool { n++; return n == 3 })
	if f.msg != "" || n != 3 {
		t.Fatalf("Within failed with %q after %d checks; want success at the third", f.msg, n)
	}
}

func TestFreePortIsAPortOneCanListenOn(t *testing.T) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestTheCAsServerAndClientCertificatesCompleteAMutualTLSHandshakeAndAnotherCAsDoNot(t *testing.T) {
	ca, other := testkit.NewCA(t, "test CA"), testkit.NewCA(t, "other CA")
	for _, f := range []string{ca.CertFile} {
		if b, err := os.ReadFile(f); err != nil || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
			t.Fatalf("%s is not a PEM certificate: %v", f, err)
		}
	}
	server := ca.Server(t, "server")
	for _, tc := range []struct {
		name   string
		client testkit.Cert
		ok     bool
	}{
		{"The CA's client certificate is accepted.", ca.Client(t, "client"), true},
		{"Another CA's client certificate is refused.", other.Client(t, "client"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The files hold the same certificate as TLS.
			fromFiles, err := tls.LoadX509KeyPair(tc.client.CertFile, tc.client.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				s, err := l.Accept()
				if err != nil {
					return
				}
				defer s.Close()
				_ = s.SetDeadline(time.Now().Add(10 * time.Second))
				srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
				if srv.Handshake() == nil {
					_, _ = srv.Write([]byte("ok"))
				}
			}()
			// In TLS 1.3 the client learns that the server refused its
			// certificate only when it reads.
			cli, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{fromFiles}})
			var got []byte
			if err == nil {
				_ = cli.SetDeadline(time.Now().Add(10 * time.Second))
				got, err = io.ReadAll(cli)
				cli.Close()
			}
			if ok := string(got) == "ok"; ok != tc.ok {
				t.Fatalf("the server answered %q (%v); want acceptance %v", got, err, tc.ok)
			}
		})
	}
}
