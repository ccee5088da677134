package logging

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// maxTracked bounds how many distinct messages a Dedup remembers. Past it,
// messages whose interval has ended are forgotten first; a message that
// finds no room is written without sampling rather than dropped.
const maxTracked = 1024

// Dedup is a slog.Handler that writes each distinct record at or above a
// level at most once per interval. A record is distinct by its level,
// message and attributes (those added with WithAttrs and WithGroup
// included, its time excluded). The first record written after an interval
// in which copies were dropped carries "repeated": how many were dropped
// since the last one written. Records below the level pass through.
//
// Handlers derived with WithAttrs and WithGroup share the parent's memory,
// as the loggers client-go derives with WithName and WithValues share one
// backoff loop.
type Dedup struct {
	next     slog.Handler
	min      slog.Level
	prefix   string // the attributes and groups added so far, encoded
	interval time.Duration
	state    *dedupState
}

type dedupState struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[string]*dedupEntry
}

type dedupEntry struct {
	written    time.Time // when a copy was last written
	suppressed int       // copies dropped since then
}

// NewDedup wraps next so that records at or above min repeat at most once
// per interval.
func NewDedup(next slog.Handler, interval time.Duration, min slog.Level) *Dedup {
	return &Dedup{next: next, min: min, interval: interval,
		state: &dedupState{now: time.Now, seen: map[string]*dedupEntry{}}}
}

// SetClock replaces time.Now, for tests.
func (d *Dedup) SetClock(now func() time.Time) {
	d.state.mu.Lock()
	d.state.now = now
	d.state.mu.Unlock()
}

// Enabled implements slog.Handler.
func (d *Dedup) Enabled(ctx context.Context, l slog.Level) bool { return d.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (d *Dedup) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < d.min {
		return d.next.Handle(ctx, r)
	}
	repeated, write := d.state.admit(d.key(r), d.interval)
	if !write {
		return nil
	}
	if repeated > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", repeated))
	}
	return d.next.Handle(ctx, r)
}

// admit reports whether a record with key may be written now, and how many
// copies were dropped since the last one written.
func (s *dedupState) admit(key string, interval time.Duration) (repeated int, write bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e, ok := s.seen[key]
	if ok && now.Sub(e.written) < interval {
		e.suppressed++
		return 0, false
	}
	if ok {
		repeated = e.suppressed
		e.written, e.suppressed = now, 0
		return repeated, true
	}
	if len(s.seen) >= maxTracked {
		for k, old := range s.seen {
			if now.Sub(old.written) >= interval {
				delete(s.seen, k)
			}
		}
	}
	if len(s.seen) < maxTracked {
		s.seen[key] = &dedupEntry{written: now}
	}
	return 0, true
}

func (d *Dedup) key(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(r.Message)
	b.WriteByte(0)
	b.WriteString(d.prefix)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, a)
		return true
	})
	return b.String()
}

func writeAttr(b *strings.Builder, a slog.Attr) {
	b.WriteString(a.Key)
	b.WriteByte('=')
	b.WriteString(a.Value.Resolve().String())
	b.WriteByte(0)
}

// WithAttrs implements slog.Handler.
func (d *Dedup) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(d.prefix)
	for _, a := range as {
		writeAttr(&b, a)
	}
	c := *d
	c.next, c.prefix = d.next.WithAttrs(as), b.String()
	return &c
}

// WithGroup implements slog.Handler.
func (d *Dedup) WithGroup(name string) slog.Handler {
	c := *d
	c.next, c.prefix = d.next.WithGroup(name), d.prefix+name+"{"+"\x00"
	return &c
}

var _ slog.Handler = (*Dedup)(nil)
