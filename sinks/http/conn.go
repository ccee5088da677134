package httpsink

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/kubewire/kubewire/internal/base/rawsock"
)

// connTransport is the sink's own HTTP/1.1 client, used for every receiver
// that is not reached through a proxy (newClient). It exists to cut
// goroutine hand-offs, which are what an event costs on this path: net/http's
// Transport gives each connection a read loop and a write loop goroutine, so
// one request wakes the writer, which wakes the caller, and the reader wakes
// the caller with the response and is woken again when the body is read:
// four hand-offs, each a possible futex wake of another thread, for what is a
// write and a read on one socket. Here the goroutine that calls RoundTrip
// writes the request and reads the response itself, and waits only in the
// network poller for the answer. On Linux it reads and writes the socket
// with raw system calls (internal/base/rawsock), which keep sysmon asleep.
//
// Each connection has one owner at a time: a RoundTrip takes it from the
// idle list, or dials a new one, and the response body's Close gives it
// back. The dispatcher's shards have at most one request in flight each, so
// there are at most as many connections as shards, and a shard keeps finding
// the connection it used last. Nothing watches an idle connection; instead a
// connection is checked (alive) when it is taken, which catches a receiver
// that closed it while it was idle before a request is written to it, as
// net/http's read loop would have. Requests are never retried here: as with
// net/http, a POST that may have reached the receiver is the dispatcher's to
// retry.
//
// HTTPS offers only http/1.1 in ALPN: one request at a time per connection is
// all a shard needs, and HTTP/2 would bring back a read loop goroutine.
type connTransport struct {
	addr   string      // host:port
	tls    *tls.Config // nil for http://
	dialer net.Dialer

	mu     sync.Mutex
	idle   []*conn // the most recently used last
	closed bool
}

var _ nethttp.RoundTripper = (*connTransport)(nil)

// maxInterim is how many 1xx answers a request may get before its final
// one.
const maxInterim = 5

// aLongTimeAgo is a deadline in the past, which makes a blocked read or
// write on a connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

func newConnTransport(target *url.URL, tc *tls.Config) *connTransport {
	port := target.Port()
	if port == "" {
		port = "80"
		if target.Scheme == "https" {
			port = "443"
		}
	}
	t := &connTransport{
		addr:   net.JoinHostPort(target.Hostname(), port),
		dialer: net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
	}
	if tc != nil {
		t.tls = tc.Clone()
		t.tls.NextProtos = []string{"http/1.1"}
		if t.tls.ServerName == "" {
			t.tls.ServerName = target.Hostname()
		}
	}
	return t
}

// conn is one connection and its buffers.
type conn struct {
	t      *connTransport
	nc     net.Conn
	raw    syscall.RawConn // the TCP socket, under TLS too; nil if unknown
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	head   []byte // a request's head, built by the sink (postDirect)
}

// RoundTrip sends req on a connection of its own and reads the answer. The
// request's context bounds it as a deadline on the connection, which the
// response body keeps until it is closed; cancelling the context moves that
// deadline to the past, which ends a blocked read or write at once, without a
// goroutine to watch the context.
func (t *connTransport) RoundTrip(req *nethttp.Request) (*nethttp.Response, error) {
	ctx := req.Context()
	c, err := t.get(ctx)
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, ctxError(ctx, err)
	}
	deadline, _ := ctx.Deadline() // the zero time, none, when it has none
	stop := c.watch(ctx, deadline)
	werr := req.Write(c.bw)
	if werr == nil {
		werr = c.bw.Flush()
	}
	return c.answer(ctx, req, werr, stop)
}

// exchange writes a request the caller serialised (head, then body) and
// reads its answer, as RoundTrip does for a *nethttp.Request. deadline
// bounds it, up to the response body's Close, and so does ctx.
func (c *conn) exchange(ctx context.Context, deadline time.Time, head, body []byte) (*nethttp.Response, error) {
	stop := c.watch(ctx, deadline)
	_, werr := c.bw.Write(head)
	if werr == nil {
		_, werr = c.bw.Write(body)
	}
	if werr == nil {
		werr = c.bw.Flush()
	}
	return c.answer(ctx, postRequest, werr, stop)
}

// postRequest is what net/http's response reader is told the request was:
// it looks at the method alone.
var postRequest = &nethttp.Request{Method: nethttp.MethodPost}

// watch sets the connection's deadline, and moves it to the past when ctx
// ends first, which ends a blocked read or write at once without a
// goroutine to watch ctx. The returned stop reports false if ctx ended
// meanwhile.
func (c *conn) watch(ctx context.Context, deadline time.Time) (stop func() bool) {
	_ = c.nc.SetDeadline(deadline)
	if ctx.Done() == nil {
		return neverEnded
	}
	return context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
}

func neverEnded() bool { return true }

// answer reads the answer to req, whose write ended with werr. A receiver
// may answer before it has read the whole request (a 413, say) and close;
// its answer is then worth more than the write's error, as net/http has
// it.
func (c *conn) answer(ctx context.Context, req *nethttp.Request, werr error, stop func() bool) (*nethttp.Response, error) {
	resp, rerr := c.readResponse(req)
	if rerr != nil {
		stop()
		c.close()
		if werr != nil {
			return nil, ctxError(ctx, werr)
		}
		return nil, ctxError(ctx, rerr)
	}
	b := &body{c: c, rc: resp.Body, stop: stop,
		reuse: werr == nil && !resp.Close && !req.Close && resp.StatusCode >= 200}
	if resp.ContentLength == 0 {
		b.eof = true
	}
	resp.Body = b
	return resp, nil
}

// readResponse reads the final answer to req, skipping interim ones (100
// Continue, 103 Early Hints). 101 is final: kubewire never asks to switch
// protocols, so it is an unexpected answer like any other.
func (c *conn) readResponse(req *nethttp.Request) (*nethttp.Response, error) {
	for n := 0; ; n++ {
		resp, err := nethttp.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		interim := resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != nethttp.StatusSwitchingProtocols
		if !interim || n == maxInterim {
			return resp, nil
		}
	}
}

// ctxError is what a failed request reports: the context's error when the
// context ended it, as net/http reports, so that callers can tell a timeout
// from a receiver that went away. The connection's deadline is the
// context's, so a deadline that passed is the context's too, even when the
// context's own timer has not fired yet.
func ctxError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// get returns an idle connection that still looks alive, or dials one.
func (t *connTransport) get(ctx context.Context) (*conn, error) {
	return t.getBy(ctx, time.Time{})
}

// getBy is get with a deadline for the dial too, when ctx does not carry
// the request's deadline (postDirect); the zero time adds none.
func (t *connTransport) getBy(ctx context.Context, deadline time.Time) (*conn, error) {
	now := time.Now()
	t.mu.Lock()
	for len(t.idle) > 0 {
		c := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		t.mu.Unlock()
		if now.Sub(c.idleAt) < idleConnTimeout && c.alive() {
			return c, nil
		}
		c.close()
		t.mu.Lock()
	}
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return t.dial(ctx)
}

// put gives c back for the next request, and closes what has been idle too
// long: the list is in the order of use, so those are at its start.
func (t *connTransport) put(c *conn) {
	now := time.Now()
	c.idleAt = now
	t.mu.Lock()
	if t.closed || len(t.idle) >= maxIdleConns {
		t.mu.Unlock()
		c.close()
		return
	}
	stale := 0
	for stale < len(t.idle) && now.Sub(t.idle[stale].idleAt) >= idleConnTimeout {
		stale++
	}
	old := append([]*conn(nil), t.idle[:stale]...)
	t.idle = append(t.idle[:0], t.idle[stale:]...)
	t.idle = append(t.idle, c)
	t.mu.Unlock()
	for _, o := range old {
		o.close()
	}
}

// CloseIdleConnections closes the idle connections, and from then on every
// connection as its request ends: it is called when the sink closes for
// good.
func (t *connTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.closed = nil, true
	t.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
}

func (t *connTransport) dial(ctx context.Context) (*conn, error) {
	nc, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	nc = rawsock.Wrap(nc)
	c.nc = nc
	if t.tls != nil {
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		tc := tls.Client(nc, t.tls)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		c.nc = tc
	}
	c.br = bufio.NewReader(c.nc)
	c.bw = bufio.NewWriter(c.nc)
	return c, nil
}

func (c *conn) close() { _ = c.nc.Close() }

// alive reports whether an idle connection can take a request: the
// receiver sent nothing since the last answer, neither data (a TLS
// close_notify, a stray byte) nor the end of the stream. Checking costs one
// non-blocking peek at the socket.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		return true
	}
	return rawsock.PeekIdle(c.raw)
}

// body is a response body that gives its connection back once it has been
// read to its end and closed, and closes the connection otherwise: what
// is left unread of an answer would be taken for the next one.
type body struct {
	c     *conn
	rc    io.ReadCloser
	stop  func() bool
	reuse bool
	eof   bool
	done  bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, nethttp.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.reuse = false
	}
	return n, err
}

func (b *body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// stop is false when the context ended meanwhile: the connection's
	// deadline is then in the past, or about to be.
	if b.stop() && b.reuse && b.eof {
		b.c.t.put(b.c)
		return nil
	}
	// Not rc.Close: it would read the rest of the body first.
	b.c.close()
	return nil
}
