//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package rawsock

import "syscall"

// PeekIdle reports whether nothing is waiting to be read on an idle socket
// and the peer has not closed it: a recv that would block. A byte, or the end
// of the stream (recv returns 0), means the receiver is done with the
// connection.
func PeekIdle(raw syscall.RawConn) bool {
	var buf [1]byte
	idle := false
	err := raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for the socket to become readable
	})
	return err == nil && idle
}
