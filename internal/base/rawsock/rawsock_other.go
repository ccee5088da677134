//go:build !linux

package rawsock

import "net"

// Wrap leaves nc as it is: the raw system calls of rawsock_linux.go are
// written for Linux alone.
func Wrap(nc net.Conn) net.Conn { return nc }

// Raw reports false: Wrap leaves connections as they are here.
func Raw(net.Conn) bool { return false }
