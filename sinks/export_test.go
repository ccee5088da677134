package sinks

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/kubewire/kubewire/encoding"
)

// TestSpool is the disk spool with the dispatcher's record format, for the
// spool benchmarks.
type TestSpool struct{ s *diskSpool }

func OpenTestSpool(opt SpoolOptions) (*TestSpool, error) {
	s, err := openSpool(opt, slog.New(slog.NewTextHandler(io.Discard, nil)), new(atomic.Int64))
	return &TestSpool{s}, err
}

// SpoolRecord encodes it as the dispatcher spools it.
func SpoolRecord(it *Item) ([]byte, error) {
	ev, err := it.Event()
	if err != nil {
		return nil, err
	}
	return appendSpoolRecord(nil, &entry{item: it, key: it.Change.Key, size: it.bytes()}, ev), nil
}

func (t *TestSpool) Put(rec []byte) error { return t.s.put(rec) }

// Next reads the oldest record and decodes it back into its event.
func (t *TestSpool) Next(ctx context.Context) (*encoding.Event, error) {
	b, err := t.s.next(ctx)
	if err != nil {
		return nil, err
	}
	r, err := parseSpoolRecord(b)
	if err != nil {
		return nil, err
	}
	return r.event, nil
}

func (t *TestSpool) Close() error { return t.s.close() }

// Depth is the number of unread records.
func (t *TestSpool) Depth() int64 { return t.s.depth() }

// Bytes is what the spool counts against MaxBytes.
func (t *TestSpool) Bytes() int64 { return t.s.bytes.Load() }
