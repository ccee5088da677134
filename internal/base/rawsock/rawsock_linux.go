package rawsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawSocket is a TCP connection that reads and writes with raw system
// calls, which leave the Go scheduler out. Each read and write of package
// net enters the scheduler (entersyscall), and the first such call after
// every P went idle wakes sysmon, the runtime's monitor thread, from its
// deep sleep; sysmon then naps 20 µs at a time until every P is idle again,
// each nap a context switch. A sink waiting for its answer leaves the
// process idle, so the answer's read paid that wake and its naps on every
// event. Per-thread counts of the shipped binary into HTTP at 200 writes/s
// put sysmon at 4.7 to 5.5 of about 8 switches per event through net's
// calls, and at 3.9 to 4.3 with these (docs/benchmarks.md). The socket is
// non-blocking, so neither call can hold the thread; waiting for the socket
// is still the network poller's, under the connection's deadlines
// (syscall.RawConn).
type rawSocket struct {
	*net.TCPConn
	rc syscall.RawConn

	// The callbacks handed to rc are method values made once, in Wrap: a
	// closure made per call escapes through the RawConn interface together
	// with what it captures, four allocations for a write and a read. Their
	// state is a field per direction, under a lock per direction, which
	// costs nothing more: net's own lock on the descriptor already lets one
	// read and one write through at a time.
	rmu   sync.Mutex
	rbuf  []byte
	rn    int
	rerr  syscall.Errno
	readf func(uintptr) bool

	wmu    sync.Mutex
	wbuf   []byte
	wn     int
	werr   syscall.Errno
	writef func(uintptr) bool
}

// Wrap returns nc as a rawSocket when it is a TCP connection, and nc
// itself otherwise. Wrap the connection before any TLS client, not the TLS
// connection: its records are read and written through the wrapped one.
func Wrap(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &rawSocket{TCPConn: tc, rc: rc}
	s.readf, s.writef = s.read, s.write
	return s
}

// Raw reports whether nc reads and writes with raw system calls: whether it
// came from Wrap or a Dialer. Tests use it to prove a sink's connections do.
func Raw(nc net.Conn) bool {
	_, ok := nc.(*rawSocket)
	return ok
}

func (s *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	s.rbuf, s.rn, s.rerr = p, 0, 0
	err := s.rc.Read(s.readf)
	n, errno := s.rn, s.rerr
	s.rbuf = nil
	s.rmu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, s.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is Read's callback, run by the poller with the descriptor.
func (s *rawSocket) read(fd uintptr) bool {
	p := s.rbuf
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // the poller waits for the socket
		}
		s.rn, s.rerr = int(r), e
		return true
	}
}

func (s *rawSocket) Write(p []byte) (int, error) {
	s.wmu.Lock()
	s.wbuf, s.wn, s.werr = p, 0, 0
	err := s.rc.Write(s.writef)
	n, errno := s.wn, s.werr
	s.wbuf = nil
	s.wmu.Unlock()
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, s.opError("write", errno)
	}
	return n, nil
}

// write is Write's callback, run by the poller with the descriptor until
// all of wbuf is written or the socket fails.
func (s *rawSocket) write(fd uintptr) bool {
	p := s.wbuf
	for s.wn < len(p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[s.wn])), uintptr(len(p)-s.wn))
		switch e {
		case 0:
			s.wn += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.werr = e
			return true
		}
	}
	return true
}

func (s *rawSocket) opError(op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// PeekIdle reports whether nothing is waiting to be read on an idle socket
// and the peer has not closed it: a recv that would block. A byte, or the end
// of the stream (recv returns 0), means the receiver is done with the
// connection. The call is raw for the reason rawSocket's are.
func PeekIdle(raw syscall.RawConn) bool {
	var buf [1]byte
	idle := false
	err := raw.Read(func(fd uintptr) bool {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		idle = e == syscall.EAGAIN
		return true // never wait for the socket to become readable
	})
	return err == nil && idle
}
