//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package httpsink

import "syscall"

// peekIdle cannot look at the socket here; a connection the receiver closed
// while idle fails its next request, which the dispatcher retries.
func peekIdle(syscall.RawConn) bool { return true }
