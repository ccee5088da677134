// Package stdout is the sink that writes one structured-mode CloudEvent (JSON)
// per line, for demos, debugging and piping into other tools.
package stdout

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/sinks"
)

// Type is the config `type` of this sink.
const Type = "stdout"

// Writer writes events to an io.Writer. A write is acknowledged once the line
// is handed to the writer; there is no broker behind it.
type Writer struct {
	mu     sync.Mutex
	w      *bufio.Writer
	pretty bool
	closed bool
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("stdout: sink is closed")

var _ sinks.Sink = (*Writer)(nil)

// New is the sinks.Factory of the stdout sink.
func New(cfg config.Sink, deps sinks.Deps) (sinks.Sink, error) {
	out := deps.Stdout
	if out == nil {
		out = os.Stdout
	}
	w := &Writer{w: bufio.NewWriterSize(out, 64<<10)}
	if cfg.Stdout != nil {
		w.pretty = cfg.Stdout.Pretty
	}
	return w, nil
}

// Connect does nothing: stdout is always there.
func (w *Writer) Connect(context.Context) error { return nil }

// Write writes each event as one line and flushes, so a reader sees whole
// batches promptly. Concurrent shards are serialised so lines never interleave.
// An event that cannot be marshalled is refused alone; a failed flush fails
// every other event, since which lines got out is unknown.
func (w *Writer) Write(_ context.Context, events []*event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	var be *sinks.BatchError
	for i, ev := range events {
		var b []byte
		var err error
		if w.pretty {
			b, err = json.MarshalIndent(ev, "", "  ")
		} else {
			b, err = json.Marshal(ev)
		}
		if err != nil {
			if be == nil {
				be = sinks.NewBatchError(len(events))
			}
			be.Failed(i, sinks.Permanent(fmt.Errorf("stdout: marshal event %s: %w", ev.ID(), err)))
			continue
		}
		w.w.Write(b)
		w.w.WriteByte('\n')
	}
	if err := w.w.Flush(); err != nil {
		err = fmt.Errorf("stdout: %w", err)
		if be == nil {
			return err
		}
		for i := range events {
			if be.Err(i) == nil {
				be.Failed(i, err)
			}
		}
	}
	return be.ErrorOrNil()
}

// Close flushes what is buffered; later Writes fail with ErrClosed.
func (w *Writer) Close(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.w.Flush()
}

// Register adds the stdout sink to r.
func Register(r sinks.Registry) { r[Type] = New }
