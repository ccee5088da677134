package httpsink_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ceclient "github.com/cloudevents/sdk-go/v2/client"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// receiver is a CloudEvents HTTP receiver that kubewire did not write:
// sdk-go's http protocol serves each request and sdk-go's client decodes it
// (binary or structured) and calls us, and we answer only once the event is
// recorded, so an acknowledged event is always in the record. sdk-go's
// client cannot receive a batch (its invoker decodes one event per
// message), so batches are decoded in front of it with sdk-go's
// NewEventsFromHTTPRequest. Events are kept per request path, so that each
// case of a suite posts to a destination of its own, and survive a
// restart, as a broker's storage would.
type receiver struct {
	addr    string // host:port, fixed after the first start
	tls     *tls.Config
	maxBody int64

	mu       sync.Mutex
	events   map[string][]*event.Event // by request path
	requests []request
	faults   []int // statuses for the next POSTs, in order
	stop     func()
}

// request is what the receiver saw of one request.
type request struct {
	Method, Path string
	ProtoMajor   int
	Header       http.Header
	// PeerCN is the common name of the client's certificate, if it sent
	// one.
	PeerCN string
}

type receiverOptions struct {
	// TLS, when set, serves HTTPS (HTTP/2 when the client offers it).
	TLS *tls.Config
	// MaxBody refuses larger requests with 413, as a proxy would; 0 takes
	// any size.
	MaxBody int64
}

func startReceiver(t *testing.T, o receiverOptions) *receiver {
	t.Helper()
	r := &receiver{addr: "127.0.0.1:0", tls: o.TLS, maxBody: o.MaxBody, events: map[string][]*event.Event{}}
	r.start(t)
	t.Cleanup(r.shutdown)
	return r
}

func (r *receiver) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatalf("receiver: listen on %s: %v", r.addr, err)
	}
	r.addr = l.Addr().String()
	if r.tls != nil {
		tc := r.tls.Clone()
		tc.NextProtos = []string{"h2", "http/1.1"}
		l = tls.NewListener(l, tc)
	}
	p, err := cehttp.New(cehttp.WithListener(l), cehttp.WithMiddleware(r.middleware),
		cehttp.WithRequestDataAtContextMiddleware(),
		// A restart is abrupt: requests in flight are cut, not finished.
		cehttp.WithShutdownTimeout(time.Millisecond))
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	c, err := ceclient.New(p)
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.StartReceiver(ctx, func(ctx context.Context, ev event.Event) protocol.Result {
			path := ""
			if rd := cehttp.RequestDataFromContext(ctx); rd != nil {
				path = rd.URL.Path
			}
			r.record(path, &ev)
			return nil
		})
	}()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	// The listener is open already; wait until the server serves on it, so
	// that a restart is over when Restart returns.
	testkit.Eventually(t, "the receiver to serve", func() bool {
		conn, err := net.Dial("tcp", r.addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// Restart stops the receiver, cutting requests in flight, and starts it
// again on the same address with the events it had.
func (r *receiver) Restart(t *testing.T) {
	t.Helper()
	r.stop()
	r.start(t)
}

func (r *receiver) shutdown() { r.stop() }

// URL is the receiver's base URL.
func (r *receiver) URL() string {
	if r.tls != nil {
		return "https://" + r.addr
	}
	return "http://" + r.addr
}

func (r *receiver) record(path string, evs ...*event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[path] = append(r.events[path], evs...)
}

// Events returns the events received at path, in the order acknowledged.
func (r *receiver) Events(path string) []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*event.Event(nil), r.events[path]...)
}

// Requests returns every request seen so far.
func (r *receiver) Requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

// Posts returns the POSTs to path seen so far.
func (r *receiver) Posts(path string) []request {
	var out []request
	for _, q := range r.Requests() {
		if q.Method == http.MethodPost && q.Path == path {
			out = append(out, q)
		}
	}
	return out
}

// Fail makes the next POSTs fail with these statuses, one each, in order;
// a 0 lets its POST through.
// The refusal's body echoes the request's Authorization header, as a
// careless error page might, so that tests can check it stays out of logs.
func (r *receiver) Fail(codes ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, codes...)
}

func (r *receiver) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		seen := request{Method: req.Method, Path: req.URL.Path, ProtoMajor: req.ProtoMajor, Header: req.Header.Clone()}
		if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
			seen.PeerCN = req.TLS.PeerCertificates[0].Subject.CommonName
		}
		r.requests = append(r.requests, seen)
		fault := 0
		if req.Method == http.MethodPost && len(r.faults) > 0 {
			fault, r.faults = r.faults[0], r.faults[1:]
		}
		r.mu.Unlock()
		switch {
		case fault != 0:
			_, _ = io.Copy(io.Discard, req.Body)
			http.Error(w, fmt.Sprintf("refused; you sent Authorization: %s", req.Header.Get("Authorization")), fault)
		case req.Method == http.MethodPost && r.maxBody > 0 && req.ContentLength > r.maxBody:
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		case req.Method == http.MethodPost && cehttp.IsHTTPBatch(req.Header):
			evs, err := cehttp.NewEventsFromHTTPRequest(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			ptrs := make([]*event.Event, len(evs))
			for i := range evs {
				if err := evs[i].Validate(); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				ptrs[i] = &evs[i]
			}
			r.record(req.URL.Path, ptrs...)
			w.WriteHeader(http.StatusAccepted)
		default:
			next.ServeHTTP(w, req)
		}
	})
}

var seq atomic.Int64

// freshPath is a request path no other case posts to.
func freshPath() string { return "/events/" + strconv.FormatInt(seq.Add(1), 10) }

// newSink builds a sink named after the test, with a logger that writes
// warnings and errors to the test's output.
func newSink(t *testing.T, cfg *httpsink.Config) sinks.Sink {
	t.Helper()
	s, err := httpsink.New(t.Name(), cfg, sinks.Deps{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// connect connects s, failing the test if it cannot, and closes it when
// the test ends.
func connect(t *testing.T, s sinks.Sink) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return ctx
}
