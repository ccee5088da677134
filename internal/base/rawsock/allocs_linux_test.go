//go:build linux && !race

package rawsock

import (
	"net"
	"testing"
)

// A raw write and read allocate nothing, as net's do: a sink makes one of
// each per request, so an allocation here is one per event at a trickle.
func TestARawWriteAndReadAllocateNothing(t *testing.T) {
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
	msg, buf := []byte("ping"), make([]byte, 4)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a write and a read allocate %v times, want 0", allocs)
	}
}
