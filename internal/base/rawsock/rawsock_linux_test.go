package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A write larger than the socket's buffers returns EAGAIN part-way; the rest
// must go once the poller says the socket is writable, in order, and reads
// must see the peer's bytes, its end of the stream and the deadline.
func TestARawSocketCarriesMoreThanItsBuffersAndKeepsDeadlinesAndEOF(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan []byte, 1)
	peer := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		peer <- c
		b, _ := io.ReadAll(io.LimitReader(c, 16<<20))
		got <- b
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := Wrap(nc)
	defer s.Close()
	if !Raw(s) {
		t.Fatalf("Wrap gave %T, want *rawSocket", s)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	if n, err := s.Write(want); n != len(want) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(want))
	}
	p := <-peer
	defer p.Close()

	if err := s.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with nothing sent = %v; want the deadline", err)
	}
	if err := s.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	p.Close()
	b, err := io.ReadAll(s)
	if err != nil || string(b) != "answer" {
		t.Fatalf("ReadAll = %q, %v; want the answer, then EOF", b, err)
	}
}

// The sinks hand a Dialer to their clients (nats.go, kafka-go): both of its
// methods must give raw connections.
func TestADialersConnectionsAreRaw(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d := &Dialer{Dialer: net.Dialer{Timeout: 5 * time.Second}}
	for name, dial := range map[string]func() (net.Conn, error){
		"Dial":        func() (net.Conn, error) { return d.Dial("tcp", l.Addr().String()) },
		"DialContext": func() (net.Conn, error) { return d.DialContext(t.Context(), "tcp", l.Addr().String()) },
	} {
		c, err := dial()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !Raw(c) {
			t.Errorf("%s gave %T, want a raw socket", name, c)
		}
		c.Close()
	}
}

// echo answers each connection's bytes with the same bytes until it closes.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// nats.go and kafka-go read on one goroutine while others write: each
// direction keeps its own state, and every byte comes back in order.
func TestOneGoroutineReadsWhileAnotherWrites(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echo(l)
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := Wrap(nc)
	defer s.Close()
	want := bytes.Repeat([]byte("0123456789"), 100_000)
	wrote := make(chan error, 1)
	go func() {
		for b := want; len(b) > 0; b = b[min(len(b), 1000):] {
			if _, err := s.Write(b[:min(len(b), 1000)]); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	if err := s.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the echo differs from what was written")
	}
}
