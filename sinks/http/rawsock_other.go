//go:build !linux

package httpsink

import "net"

// wrapSocket leaves nc as it is: the raw system calls of rawsock_linux.go
// are written for Linux alone.
func wrapSocket(nc net.Conn) net.Conn { return nc }
