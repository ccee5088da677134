package httpsink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The sink writes the requests to a receiver it reaches directly itself
// (postDirect), and net/http writes those through a proxy. A receiver
// must not be able to tell them apart: the same request line, Host,
// headers and body as net/http's Request.Write makes of the same request.
func TestTheDirectRequestIsTheRequestNetHTTPWrites(t *testing.T) {
	t.Setenv(EnvSink, "")
	t.Setenv(EnvCEOverrides, `{"extensions": {"team": "shop floor"}}`)
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ev := sinktest.BenchEvent(t, benchdata.ConfigMaps)
	ev.SetExtension("note", "a value with spaces, \"quotes\" and é")
	for _, c := range []struct {
		url, mode string
	}{
		{"http://127.0.0.1:8080/events?key=k&x=%2F", config.ContentModeBinary},
		{"http://receiver.example/", config.ContentModeStructured},
		{"http://bücher.example:81", ContentModeBatched},
		{"http://[fe80::1%25eth0]:8080/in", config.ContentModeBinary},
		{"https://receiver.example:", config.ContentModeBinary},
	} {
		t.Run(c.url+" "+c.mode, func(t *testing.T) {
			ss, err := New("t", &Config{URL: c.url, ContentMode: c.mode,
				Headers: map[string]string{"x-tenant": " blue ", "X-Other": "1"},
				Auth:    &Auth{Scheme: "Bearer", ValueFile: secret}}, sinks.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			s := ss.(*Sink)
			auth, err := s.auth.header(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var r *request
			switch c.mode {
			case config.ContentModeBinary:
				ct, err := binaryContentType(ev)
				if err != nil {
					t.Fatal(err)
				}
				r = &request{binary: ev, contentType: ct, body: ev.Data()}
			default:
				body, err := structuredBody(s.withOverrides(ev))
				if err != nil {
					t.Fatal(err)
				}
				r = &request{contentType: structuredValue, body: body}
			}

			direct := append(s.appendHead(nil, r, auth), r.body...)
			req, err := nethttp.NewRequest(nethttp.MethodPost, s.rawURL, bytes.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = s.header(r, auth)
			var viaNetHTTP bytes.Buffer
			if err := req.Write(&viaNetHTTP); err != nil {
				t.Fatal(err)
			}

			got, want := readRequest(t, direct), readRequest(t, viaNetHTTP.Bytes())
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the sink wrote\n%q\nnet/http writes\n%q", direct, viaNetHTTP.Bytes())
			}
			if _, ok := got.header["Ce-Note"]; !ok && c.mode == config.ContentModeBinary {
				t.Errorf("no Ce-Note header: %v", got.header)
			}
		})
	}
}

type parsedRequest struct {
	method, uri, host, proto string
	header                   nethttp.Header
	length                   int64
	body                     []byte
}

func readRequest(t *testing.T, b []byte) parsedRequest {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(b))
	req, err := nethttp.ReadRequest(br)
	if err != nil {
		t.Fatalf("%v in %q", err, b)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if br.Buffered() != 0 {
		t.Errorf("%d bytes after the request", br.Buffered())
	}
	return parsedRequest{req.Method, req.RequestURI, req.Host, req.Proto, req.Header, req.ContentLength, body}
}

// A request the sink writes itself has no context of its own carrying the
// sink's timeout, so a connection dialled for it must end at the request's
// deadline, not at the dial's or the TLS handshake's own (10 s each).
func TestADialForADirectRequestEndsAtTheRequestsDeadline(t *testing.T) {
	// Never accepted: the kernel completes the TCP handshake, and no one
	// answers the TLS one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ct := newConnTransport(&url.URL{Scheme: "https", Host: l.Addr().String()}, &tls.Config{})
	start := time.Now()
	c, err := ct.getBy(context.Background(), start.Add(200*time.Millisecond))
	if err == nil {
		c.close()
		t.Fatal("a TLS handshake nobody answered succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline's", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the dial took %v, past the request's deadline of 200ms", took)
	}
}
