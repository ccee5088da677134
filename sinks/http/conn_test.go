package httpsink_test

import (
	"bufio"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// connServer is an httptest server that counts the connections it accepted
// and closed and records the ce-id of each POST it answered 2xx, so that
// tests can see how the sink uses connections.
type connServer struct {
	*httptest.Server
	opened, closed atomic.Int64

	mu  sync.Mutex
	ids []string
}

// startConnServer serves handler, which answers every POST; a handler that
// returns without writing answers 200. With tlsOn it serves HTTPS (and
// offers HTTP/2), and certFile is its certificate, for tls.caFile.
func startConnServer(t *testing.T, tlsOn bool, handler http.HandlerFunc) (cs *connServer, certFile string) {
	t.Helper()
	cs = &connServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // the Connect probe
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		handler(rec, r)
		if rec.code/100 == 2 {
			cs.mu.Lock()
			cs.ids = append(cs.ids, r.Header.Get("Ce-Id"))
			cs.mu.Unlock()
		}
	}))
	cs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			cs.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			cs.closed.Add(1)
		}
	}
	if tlsOn {
		cs.EnableHTTP2 = true
		cs.StartTLS()
		certFile = filepath.Join(t.TempDir(), "ca.crt")
		pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cs.Certificate().Raw})
		if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
			t.Fatal(err)
		}
	} else {
		cs.Start()
	}
	t.Cleanup(cs.Close)
	return cs, certFile
}

// IDs are the ce-ids of the POSTs answered 2xx, in order.
func (cs *connServer) IDs() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]string(nil), cs.ids...)
}

type statusRecorder struct {
	http.ResponseWriter
	code    int
	written bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.written && code >= 200 {
		r.code, r.written = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return r.ResponseWriter.(http.Hijacker).Hijack()
}

func ok(http.ResponseWriter, *http.Request) {}

// write sends one event of key "a" at rv and returns its id.
func write(t *testing.T, ctx context.Context, s sinks.Sink, rv int) (string, error) {
	t.Helper()
	ev := mustEvent(t, change("a", rv))
	return ev.ID(), s.Write(ctx, []*encoding.Event{ev})
}

func TestConsecutiveWritesShareOneKeptAliveConnection(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		name := "Over HTTP."
		if tlsOn {
			name = "Over HTTPS, which asks for HTTP/1.1 although HTTP/2 is offered."
		}
		t.Run(name, func(t *testing.T) {
			var protos sync.Map
			cs, ca := startConnServer(t, tlsOn, func(_ http.ResponseWriter, r *http.Request) {
				protos.Store(r.Proto, true)
			})
			cfg := &httpsink.Config{URL: cs.URL + "/events"}
			if tlsOn {
				cfg.TLS = &httpsink.TLS{CAFile: ca}
			}
			s := newSink(t, cfg)
			ctx := connect(t, s)
			var want []string
			for rv := 1; rv <= 20; rv++ {
				id, err := write(t, ctx, s, rv)
				if err != nil {
					t.Fatalf("Write %d: %v", rv, err)
				}
				want = append(want, id)
			}
			if got := cs.IDs(); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("received %v, want %v", got, want)
			}
			if n := cs.opened.Load(); n != 1 {
				t.Errorf("the probe and 20 Writes opened %d connections, want 1", n)
			}
			protos.Range(func(k, _ any) bool {
				if k != "HTTP/1.1" {
					t.Errorf("a request came over %v, want HTTP/1.1", k)
				}
				return true
			})
		})
	}
}

// A receiver that closes an idle connection (its idle timeout, a restart
// of a proxy) must cost nothing: the sink sees the close before it writes
// and dials again, so each event arrives once and no Write fails.
func TestAConnectionTheReceiverClosedWhileIdleIsRedialledWithoutAFailedWrite(t *testing.T) {
	cs, _ := startConnServer(t, false, ok)
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	var want []string
	for rv := 1; rv <= 5; rv++ {
		opened := cs.opened.Load()
		cs.CloseClientConnections()
		testkit.Eventually(t, "the receiver to close its connections", func() bool {
			return cs.closed.Load() == opened
		})
		id, err := write(t, ctx, s, rv)
		if err != nil {
			t.Fatalf("Write %d after the receiver closed the idle connection: %v", rv, err)
		}
		want = append(want, id)
	}
	if got := cs.IDs(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("received %v, want each event once: %v", got, want)
	}
	if n := cs.opened.Load(); n != 6 {
		t.Errorf("opened %d connections, want 6 (the probe's, then one per Write)", n)
	}
}

// A receiver that drops the connection after reading a request, without an
// answer, leaves the event unacknowledged: the Write fails with an error
// the dispatcher retries, and the next Write goes out on a new connection.
func TestAConnectionDroppedWithoutAnAnswerFailsTheWriteForARetryOnANewConnection(t *testing.T) {
	var drop atomic.Bool
	cs, _ := startConnServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if drop.CompareAndSwap(true, false) {
			_, _ = io.Copy(io.Discard, r.Body)
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			panic(http.ErrAbortHandler) // not acknowledged: the recorder must not see a 2xx
		}
	})
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	drop.Store(true)
	if _, err := write(t, ctx, s, 1); err == nil || errors.Is(err, sinks.ErrPermanent) {
		t.Fatalf("Write to a receiver that hung up = %v; want a retryable error", err)
	}
	id, err := write(t, ctx, s, 1)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := cs.IDs(); len(got) != 1 || got[0] != id {
		t.Fatalf("acknowledged %v, want %s once", got, id)
	}
}

// A receiver that answers "Connection: close" gets a new connection for
// each request, and the sink never writes to a connection it was told is
// over.
func TestAReceiverThatAnswersConnectionCloseGetsANewConnectionEachTime(t *testing.T) {
	cs, _ := startConnServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
	})
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	var want []string
	for rv := 1; rv <= 5; rv++ {
		id, err := write(t, ctx, s, rv)
		if err != nil {
			t.Fatalf("Write %d: %v", rv, err)
		}
		want = append(want, id)
	}
	if got := cs.IDs(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("received %v, want %v", got, want)
	}
	// The probe's answer keeps its connection, and the first POST takes it.
	if n := cs.opened.Load(); n != 5 {
		t.Errorf("opened %d connections, want 5, one per request", n)
	}
}

// Refusals keep the connection: their bodies are read to the end, so the
// next request does not need a new one. The classification is the sink's
// as before (TestEachStatusMapsToRetryPermanentOrTooLarge covers every
// status).
func TestRefusalsAreClassifiedAndKeepTheConnection(t *testing.T) {
	codes := make(chan int, 3)
	codes <- http.StatusServiceUnavailable
	codes <- http.StatusBadRequest
	codes <- http.StatusTooManyRequests
	cs, _ := startConnServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
		select {
		case code := <-codes:
			http.Error(w, strings.Repeat("refused ", 100), code)
		default:
		}
	})
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	for _, c := range []struct {
		status    string
		permanent bool
	}{{"503", false}, {"400", true}, {"429", false}} {
		_, err := write(t, ctx, s, 1)
		if err == nil || !strings.Contains(err.Error(), c.status) || errors.Is(err, sinks.ErrPermanent) != c.permanent {
			t.Fatalf("Write answered %s = %v; want permanent %v", c.status, err, c.permanent)
		}
	}
	if _, err := write(t, ctx, s, 2); err != nil {
		t.Fatalf("Write after the refusals: %v", err)
	}
	if n := cs.opened.Load(); n != 1 {
		t.Errorf("opened %d connections, want 1", n)
	}
}

// A request that times out leaves its answer on its way; a connection
// reused after it would read that answer as the next request's. The next
// Write must get its own answer.
func TestAfterATimeoutTheLateAnswerIsNotTakenForTheNextRequests(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	cs, _ := startConnServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(true, false) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-release
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	defer close(release) // before the server's Close, which waits for the handler
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events", Timeout: config.NewDuration(200 * time.Millisecond)})
	ctx := connect(t, s)
	_, err := write(t, ctx, s, 1)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timeout (200ms)") {
		t.Fatalf("Write to a receiver that does not answer = %v; want the timeout", err)
	}
	id, err := write(t, ctx, s, 2)
	if err != nil {
		t.Fatalf("Write after the timeout: %v", err)
	}
	if got := cs.IDs(); len(got) != 1 || got[0] != id {
		t.Fatalf("acknowledged %v, want only %s", got, id)
	}
}

// Interim answers (103 Early Hints) come before the final one and do not
// acknowledge anything.
func TestInterimAnswersAreSkippedForTheFinalOne(t *testing.T) {
	cs, _ := startConnServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
	})
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	for rv := 1; rv <= 2; rv++ {
		if _, err := write(t, ctx, s, rv); err != nil {
			t.Fatalf("Write %d: %v", rv, err)
		}
	}
	if n := len(cs.IDs()); n != 2 {
		t.Fatalf("acknowledged %d events, want 2", n)
	}
}

// Each concurrent Write owns a connection while it runs: the shards' Writes
// never share one, and there are never more connections than Writes at
// once.
func TestConcurrentWritesUseAConnectionEachAndNoMore(t *testing.T) {
	cs, _ := startConnServer(t, false, ok)
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	const writers, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := mustEvent(t, change("key-"+string(rune('a'+w)), i+1))
				if err := s.Write(ctx, []*encoding.Event{ev}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Write: %v", err)
	}
	if n := len(cs.IDs()); n != writers*each {
		t.Fatalf("acknowledged %d events, want %d", n, writers*each)
	}
	if n := cs.opened.Load(); n > writers {
		t.Errorf("opened %d connections for %d concurrent writers", n, writers)
	}
}

// Close ends the connections, idle ones at once.
func TestCloseClosesTheConnections(t *testing.T) {
	cs, _ := startConnServer(t, false, ok)
	s := newSink(t, &httpsink.Config{URL: cs.URL + "/events"})
	ctx := connect(t, s)
	if _, err := write(t, ctx, s, 1); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	testkit.Eventually(t, "the receiver to see the connection closed", func() bool {
		return cs.closed.Load() == cs.opened.Load()
	})
}

// Behind a proxy the sink goes through net/http's Transport, which speaks
// to proxies: an http:// receiver's requests go to the proxy in absolute
// form.
func TestAReceiverBehindAProxyIsReachedThroughTheProxy(t *testing.T) {
	var via atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.IsAbs() && r.URL.Host == "receiver.example:8080" {
			via.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			return
		}
		http.Error(w, "not a proxied request", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	u, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	httpsink.UseProxy(t, u)
	s := newSink(t, &httpsink.Config{URL: "http://receiver.example:8080/events"})
	ctx := connect(t, s)
	if _, err := write(t, ctx, s, 1); err != nil {
		t.Fatalf("Write through the proxy: %v", err)
	}
	if n := via.Load(); n != 2 {
		t.Fatalf("the proxy forwarded %d requests, want 2 (the probe and the POST)", n)
	}
}
