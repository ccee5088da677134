package httpsink

import (
	"fmt"
	nethttp "net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubewire/kubewire/internal/base/secretfile"
)

// authRecheck is how often the auth file is looked at for a change. A
// token that the kubelet rotates (a projected service account token, a
// Secret volume) is renewed well before it expires, so a second is prompt;
// a stat per request would cost more than it buys.
var authRecheck = time.Second

// secretHeader is the auth header. Its value is read from a file when the
// sink connects, and again whenever the file changes (a different inode,
// size or modification time: Kubernetes swaps a Secret volume's files
// atomically, so a change is always a whole new file), at most every
// authRecheck, and at once after the receiver refused the credentials.
// HTTP has no connection to re-establish, so "re-read on reconnect" would
// mean "never" for a long-lived sink.
//
// The value never leaves this type except into a request's header: errors
// name the field and the path, and redact removes it from anything the
// receiver sends back.
type secretHeader struct {
	name   string // canonical header name
	scheme string
	path   string

	cur atomic.Pointer[secretState]
	mu  sync.Mutex // serialises re-reads
}

type secretState struct {
	values  []string // the header's value, shared read-only by every request
	secret  string   // the file's content, for redact
	file    os.FileInfo
	checked time.Time
}

func newSecretHeader(a *Auth) *secretHeader {
	return &secretHeader{name: nethttp.CanonicalHeaderKey(a.Header), scheme: a.Scheme, path: a.ValueFile}
}

// header returns the header's value, reading the file first if it is due.
func (s *secretHeader) header(now time.Time) ([]string, error) {
	if st := s.cur.Load(); st != nil && now.Sub(st.checked) < authRecheck {
		return st.values, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.cur.Load()
	if st != nil && now.Sub(st.checked) < authRecheck {
		return st.values, nil // another Write re-read it meanwhile
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, fmt.Errorf("http: auth.valueFile: %w", err)
	}
	if st != nil && sameFile(st.file, fi) {
		next := *st
		next.checked = now
		s.cur.Store(&next)
		return st.values, nil
	}
	secret, err := secretfile.Read("http: auth.valueFile", s.path)
	if err != nil {
		return nil, err
	}
	switch {
	case secret == "":
		return nil, fmt.Errorf("http: auth.valueFile %s is empty", s.path)
	case checkHeaderValue(secret) != "":
		return nil, fmt.Errorf("http: auth.valueFile %s holds a control character (a line break inside the value?), which no header may carry", s.path)
	}
	v := secret
	if s.scheme != "" {
		v = s.scheme + " " + secret
	}
	next := &secretState{values: []string{v}, secret: secret, file: fi, checked: now}
	s.cur.Store(next)
	return next.values, nil
}

// refused makes the next request read the file again: the receiver did not
// accept the credentials, and the file may have been rotated since it was
// last looked at.
func (s *secretHeader) refused() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.cur.Load(); st != nil {
		next := *st
		next.checked = time.Time{}
		next.file = nil
		s.cur.Store(&next)
	}
}

// redact removes the secret from text the receiver sent back (an error
// page that echoes the request, say) before it goes into an error.
func (s *secretHeader) redact(text string) string {
	if s == nil {
		return text
	}
	if st := s.cur.Load(); st != nil && st.secret != "" {
		return strings.ReplaceAll(text, st.secret, "[redacted]")
	}
	return text
}
