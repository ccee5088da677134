// Package stdout is the sink that writes one structured-mode CloudEvent (JSON)
// per line, for demos, debugging and piping into other tools.
package stdout

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
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
	// line and indented are reused for every event, under mu.
	line     []byte
	indented bytes.Buffer
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("stdout: sink is closed")

var _ sinks.Sink = (*Writer)(nil)

// Config configures a sink of type "stdout".
type Config struct {
	// Pretty indents the JSON of each event.
	Pretty bool `json:"pretty,omitempty"`
}

// Default does nothing: every field's zero value is its default.
func (*Config) Default() {}

// Validate accepts every block: there is nothing to get wrong.
func (*Config) Validate(*field.Path, []config.Route) field.ErrorList { return nil }

// Spec is the stdout sink type.
var Spec = sinks.NewSpec(Type, schema, New)

// schema is the JSON Schema of the stdout block, for the Helm chart.
//
//go:embed schema.json
var schema string

// New builds a stdout sink.
func New(_ string, cfg *Config, deps sinks.Deps) (sinks.Sink, error) {
	out := deps.Stdout
	if out == nil {
		out = os.Stdout
	}
	w := &Writer{w: bufio.NewWriterSize(out, 64<<10)}
	w.pretty = cfg.Pretty
	return w, nil
}

// Connect does nothing: stdout is always there.
func (w *Writer) Connect(context.Context) error { return nil }

// Write writes each event as one line and flushes, so a reader sees whole
// batches promptly. Concurrent shards are serialised so lines never interleave.
// An event that cannot be marshalled is refused alone; a failed flush fails
// every other event, since which lines got out is unknown.
func (w *Writer) Write(_ context.Context, events []*encoding.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	var be *sinks.BatchError
	for i, ev := range events {
		b, err := w.format(ev)
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

// format is ev as one JSON line, or indented. The event's data is written
// as it is, so the line is checked: a line that is not JSON would break
// every reader of the stream.
func (w *Writer) format(ev *encoding.Event) ([]byte, error) {
	w.line = ev.AppendJSON(w.line[:0])
	if !w.pretty {
		if !json.Valid(w.line) {
			return nil, errors.New("the event is not valid JSON (its data claims to be JSON and is not)")
		}
		return w.line, nil
	}
	w.indented.Reset()
	if err := json.Indent(&w.indented, w.line, "", "  "); err != nil {
		return nil, err
	}
	return w.indented.Bytes(), nil
}

// Close flushes what is buffered; later Writes fail with ErrClosed.
func (w *Writer) Close(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.w.Flush()
}
