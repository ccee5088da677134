// Package rawsock gives kubewire's connections (the apiserver's, and each
// sink's) TCP sockets that read and write with raw system calls, which keep
// the Go runtime's sysmon thread asleep while the process waits for an
// event, a broker or a receiver (see Wrap). It pays only once every
// connection on an event's path is raw: one call through package net per
// event is enough to wake sysmon.
package rawsock

import (
	"context"
	"net"
)

// Dialer dials TCP connections and returns them wrapped (Wrap). Its Dial
// fits nats.go's CustomDialer and its DialContext kafka-go's Transport.Dial;
// TLS, where a client asks for it, is layered over the wrapped connection,
// so the handshake and every record also go through the raw calls.
type Dialer struct {
	net.Dialer
}

// Dial connects to address on network, as net.Dialer.Dial.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address on network, as net.Dialer.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nc, err := d.Dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return Wrap(nc), nil
}
