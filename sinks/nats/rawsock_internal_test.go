//go:build linux

package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/internal/base/rawsock"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
)

// Every connection of the sink's comes from its CustomDialer, which must
// give raw sockets: nats.go dials with package net's calls without one, and
// nothing else would notice.
func TestTheSinksConnectionsReadAndWriteWithRawSystemCalls(t *testing.T) {
	addr := testkit.ClosingListener(t)
	s, err := New("raw", &Config{Servers: []string{"nats://" + addr}}, sinks.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := s.(*Sink).options()
	if err != nil {
		t.Fatal(err)
	}
	o := natsgo.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.CustomDialer == nil {
		t.Fatal("no CustomDialer: nats.go would dial with package net's calls")
	}
	c, err := o.CustomDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !rawsock.Raw(c) {
		t.Fatalf("the dialer gave %T, want a raw socket", c)
	}
}
