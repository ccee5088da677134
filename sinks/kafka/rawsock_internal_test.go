//go:build linux

package kafka

import (
	"net"
	"testing"

	"github.com/kubewire/kubewire/internal/rawsock"
	"github.com/kubewire/kubewire/sinks"
)

// Every connection of the sink's comes from its Transport's Dial, which must
// give raw sockets: kafka-go falls back to its own dialer, and package net's
// calls, when Dial is nil, and nothing else would notice.
func TestTheSinksConnectionsReadAndWriteWithRawSystemCalls(t *testing.T) {
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
	s, err := New("raw", &Config{Brokers: []string{l.Addr().String()}}, sinks.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.(*Sink).newTransport()
	if err != nil {
		t.Fatal(err)
	}
	if tr.Dial == nil {
		t.Fatal("the transport has no Dial: kafka-go would dial with package net's calls")
	}
	c, err := tr.Dial(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !rawsock.Raw(c) {
		t.Fatalf("the transport's Dial gave %T, want a raw socket", c)
	}
}
