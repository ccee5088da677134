//go:build linux

package kafka

import (
	"testing"

	"github.com/kubewire/kubewire/internal/base/rawsock"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
)

// Every connection of the sink's comes from its Transport's Dial, which must
// give raw sockets: kafka-go falls back to its own dialer, and package net's
// calls, when Dial is nil, and nothing else would notice.
func TestTheSinksConnectionsReadAndWriteWithRawSystemCalls(t *testing.T) {
	addr := testkit.ClosingListener(t)
	s, err := New("raw", &Config{Brokers: []string{addr}}, sinks.Deps{})
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
	c, err := tr.Dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !rawsock.Raw(c) {
		t.Fatalf("the transport's Dial gave %T, want a raw socket", c)
	}
}
