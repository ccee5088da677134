package dispatch

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
)

// TestSpool is the disk spool with the dispatcher's record format, for the
// spool benchmarks.
type TestSpool struct {
	s     *spool.Spool
	bytes *atomic.Int64
}

func OpenTestSpool(opt spool.Options) (*TestSpool, error) {
	bytes := new(atomic.Int64)
	s, err := spool.Open(opt, slog.New(slog.NewTextHandler(io.Discard, nil)), bytes)
	return &TestSpool{s, bytes}, err
}

// SpoolRecord encodes it as the dispatcher spools it.
func SpoolRecord(it *Item) ([]byte, error) {
	ev, err := it.Event()
	if err != nil {
		return nil, err
	}
	return appendSpoolRecord(nil, &entry{item: it, key: it.Change.Key, size: it.bytes()}, ev), nil
}

func (t *TestSpool) Put(rec []byte) error { return t.s.Put(rec) }

// Next reads the oldest record and decodes it back into its event.
func (t *TestSpool) Next(ctx context.Context) (*encoding.Event, error) {
	b, err := t.s.Next(ctx)
	if err != nil {
		return nil, err
	}
	r, err := parseSpoolRecord(b)
	if err != nil {
		return nil, err
	}
	return r.event, nil
}

func (t *TestSpool) Close() error { return t.s.Close() }

// Depth is the number of unread records.
func (t *TestSpool) Depth() int64 { return t.s.Depth() }

// Bytes is what the spool counts against MaxBytes.
func (t *TestSpool) Bytes() int64 { return t.bytes.Load() }

// SpoolReadAhead is how much object data a lane reads back ahead of its sink.
const SpoolReadAhead = spoolReadAhead
