// Package spool is the durable FIFO under a dispatcher's overflow: records
// on disk, in order, bounded in bytes, kept across restarts.
package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	diskqueue "github.com/nsqio/go-diskqueue"

	"github.com/kubewire/kubewire/internal/base/config"
)

// Options configure a sink's disk spool.
type Options struct {
	// Dir holds this sink's spool, and nothing else.
	Dir string
	// MaxBytes bounds the spool; at the bound new changes are conflated in
	// memory instead.
	MaxBytes int64
	// Fsync is config.FsyncAlways, config.FsyncInterval (default) or
	// config.FsyncNever.
	Fsync string
	// OnCorrupt, if set, is called once for each data file the spool gave
	// up as unreadable (and removed), so the caller can count it.
	OnCorrupt func()
	// Owner is the cluster and sink whose events the spool holds, checked
	// and recorded by the dispatcher for a sink's directory (Claim); Open
	// does not look at it.
	Owner Owner
}

const (
	// MinBytes is the smallest MaxBytes the config accepts.
	MinBytes = config.MinSpoolBytes
	// minFileBytes and maxFileBytes bound the size of one data file (see
	// FileBytes).
	minFileBytes = 64 << 10
	maxFileBytes = 64 << 20
	// spoolMaxRecord bounds one record: larger than any object the
	// apiserver serves (etcd's limit is 1.5 MiB) by a wide margin.
	spoolMaxRecord = 256 << 20
	// firstGen is the generation of a new spool's write segment. Segments
	// written at shutdown take lower numbers, so they are read first.
	firstGen = int64(1) << 40
)

// FileBytes is the size at which a segment of a spool bounded by maxBytes
// rolls to its next data file. A file is deleted only once it has been read
// to its end, so while a spool drains, the part of its head file already read
// is on disk but no longer counted against maxBytes: the disk a spool uses is
// bounded by maxBytes plus one file. A sixty-fourth of maxBytes keeps that
// overshoot small (a fixed 64 MiB file once let a 2 MiB spool use 64 MiB),
// and within the quarter the chart adds to its emptyDir while up to 16
// resources drain at once.
func FileBytes(maxBytes int64) int64 {
	return min(max(maxBytes/64, minFileBytes), maxFileBytes)
}

// Spool is a FIFO of records on disk. It is a list of segments, each a
// go-diskqueue queue, read oldest generation first. New records go to the
// newest segment. At shutdown, events that were still in memory are older
// than everything on disk; they are written to a new segment that sorts
// before the others, so order holds without rewriting the spool.
//
// go-diskqueue gives us files that roll and are deleted once read, read-ahead
// and a sync policy; what it does not have is a size bound, which we keep
// here by counting the bytes of unread records.
type Spool struct {
	opt Options
	log *slog.Logger
	// bytes counts unread record bytes, shared by the spools of one sink so
	// that MaxBytes bounds them together.
	bytes *atomic.Int64

	mu   sync.Mutex
	segs []*segment // ascending generation; the last one is written to
	// ready is closed once there is a segment. A spool that never fills
	// creates no files, so a process that never overflows leaves nothing.
	ready chan struct{}
	// put has a value after a record was added: it wakes Wait.
	put chan struct{}
	// cursorErr: a failure to save a read position was logged.
	cursorErr bool
	// cut: Open cut off the tail of a file, a record that was not whole.
	cut bool
}

type segment struct {
	gen int64
	q   diskqueue.Interface
	// readEnd is set, on the queue's own goroutine, when its last read
	// error was the end of a file read whole (see logf).
	readEnd bool
	// rd follows the read position; the spool's reader only (cursor.go).
	rd reader
}

// Open opens (or creates) the spool in opt.Dir, with whatever a
// previous process left there.
func Open(opt Options, log *slog.Logger, bytes *atomic.Int64) (*Spool, error) {
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool directory: %w", err)
	}
	s := &Spool{opt: opt, log: log, ready: make(chan struct{}), put: make(chan struct{}, 1), bytes: bytes}
	s.removeBad()
	gens, err := segmentNames(opt.Dir)
	if err != nil {
		return nil, err
	}
	for _, g := range gens {
		unread, at, cut, err := repairSegment(opt.Dir, fmt.Sprintf("seg-%d", g))
		if err != nil {
			return nil, err
		}
		s.cut = s.cut || cut
		seg, err := s.newSegment(g, &at)
		if err != nil {
			return nil, err
		}
		s.bytes.Add(unread)
		s.segs = append(s.segs, seg)
	}
	if len(s.segs) > 0 {
		close(s.ready)
	}
	return s, nil
}

// newSegment opens segment gen: one that repair left reading at *at, or,
// with at nil, a new one.
func (s *Spool) newSegment(gen int64, at *position) (*segment, error) {
	every, interval := int64(1), time.Second
	switch s.opt.Fsync {
	case config.FsyncAlways:
	case config.FsyncNever:
		every, interval = 1<<62, 1<<62
	default:
		every = 1 << 62
	}
	name := fmt.Sprintf("seg-%d", gen)
	g := &segment{gen: gen}
	start := position{}
	if at != nil {
		start = *at
	} else if err := os.Remove(cursorPath(s.opt.Dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// A cursor left by an earlier segment of this number would
		// skip records of the new one at the next repair.
		return nil, fmt.Errorf("spool cursor: %w", err)
	}
	if err := g.rd.open(s.opt.Dir, name, start); err != nil {
		return nil, err
	}
	g.q = diskqueue.New(name, s.opt.Dir, FileBytes(s.opt.MaxBytes), 1, spoolMaxRecord, every, interval, g.logf(s))
	return g, nil
}

// Dir is the directory the spool lives in.
func (s *Spool) Dir() string { return s.opt.Dir }

// Cut reports whether Open cut off the tail of a data file: a record that
// was not whole. A kill can leave one, never counted as spooled; after a
// clean shutdown it means the file lost data since.
func (s *Spool) Cut() bool { return s.cut }

// Full reports whether the spool has reached its bound.
func (s *Spool) Full() bool { return s.bytes.Load() >= s.opt.MaxBytes }

// Put appends rec at the tail.
func (s *Spool) Put(rec []byte) error {
	s.mu.Lock()
	if len(s.segs) == 0 {
		seg, err := s.newSegment(firstGen, nil)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.segs = append(s.segs, seg)
		close(s.ready)
	}
	tail := s.segs[len(s.segs)-1]
	s.mu.Unlock()
	if err := tail.q.Put(rec); err != nil {
		return err
	}
	s.bytes.Add(int64(len(rec)) + 4)
	select {
	case s.put <- struct{}{}:
	default:
	}
	return nil
}

// Wait returns once the spool holds a record, without taking it, or with
// ctx's error. A reader that must decide whether to take a record can wait
// here, look again, and only then call Next: a Next that is already waiting
// takes the next record the moment it is written.
func (s *Spool) Wait(ctx context.Context) error {
	for s.Depth() == 0 {
		select {
		case <-s.put:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Depth is the number of unread records.
func (s *Spool) Depth() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, g := range s.segs {
		n += g.q.Depth()
	}
	return n
}

// Next returns the oldest unread record, waiting for one until ctx ends.
// A record is gone from the spool once Next has returned it.
func (s *Spool) Next(ctx context.Context) ([]byte, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		s.mu.Lock()
		head := s.segs[0]
		drained := len(s.segs) > 1 && head.q.Depth() == 0
		if drained {
			s.segs = s.segs[1:]
		}
		s.mu.Unlock()
		if drained {
			// A segment written at shutdown, now read to the end.
			if err := head.q.Empty(); err != nil {
				s.log.Warn("spool: removing a drained segment", "err", err)
			}
			_ = head.q.Delete()
			head.rd.close(true)
			continue
		}
		select {
		case rec := <-head.q.ReadChan():
			s.bytes.Add(-int64(len(rec)) - 4)
			if err := head.rd.took(len(rec)); err != nil && !s.cursorErr {
				// Only a position that may lag, as the library's does.
				s.cursorErr = true
				s.log.Warn("spool: cannot save the read position; after a crash, records read since the last sync may be delivered again", "dir", s.opt.Dir, "err", err)
			}
			return rec, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Prepend writes recs as a new segment read before every other one. It is
// for shutdown, when nothing reads or writes the spool any more.
func (s *Spool) Prepend(recs [][]byte) error {
	if len(recs) == 0 {
		return nil
	}
	s.mu.Lock()
	gen := firstGen - 1
	if len(s.segs) > 0 {
		gen = s.segs[0].gen - 1
	}
	s.mu.Unlock()
	g, err := s.newSegment(gen, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range recs {
		if err := g.q.Put(r); err != nil {
			errs = append(errs, err)
			break
		}
		s.bytes.Add(int64(len(r)) + 4)
	}
	errs = append(errs, g.q.Close())
	g.rd.close(false)
	return errors.Join(errs...)
}

// Close syncs and closes every segment.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, g := range s.segs {
		errs = append(errs, g.q.Close())
		g.rd.close(false)
	}
	return errors.Join(errs...)
}
