//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package rawsock

import "syscall"

// PeekIdle cannot look at the socket here and reports idle: a connection
// the peer closed while idle fails at its next use, which callers must
// handle anyway (the HTTP sink's dispatcher retries the request).
func PeekIdle(syscall.RawConn) bool { return true }
