// Package sinks holds the contract between kubewire's delivery engine
// (package dispatch) and the adapters that talk to brokers, and the registry
// of adapters.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// Sink is what an adapter implements. The dispatcher calls it; adapters do
// not retry, reorder or buffer beyond one Write.
//
// Connect is called once before the first Write. It may fail; the dispatcher
// retries it with backoff.
//
// Write publishes events in the order given and reports, for each of them,
// whether the broker acknowledged it:
//   - nil: the broker acknowledged every event.
//   - a *BatchError (errors.As finds it): each event it names failed, for
//     its own reason; every other event was acknowledged.
//   - any other error: no event was acknowledged, and the error is the
//     reason of each of them.
//
// A reason that wraps ErrPermanent refuses that event for good: the
// dispatcher logs it, counts it and drops it. Any other reason is
// transient: the dispatcher writes the failed events again, and only them,
// in their order, after a backoff. The ids are stable, so a consumer can
// drop a repeat of an event that reached the broker although it was
// reported failed.
//
// Events with the same partitionkey extension must reach the broker in
// slice order, and a failure must not let a key's later event overtake its
// earlier one: once an event fails transiently, every later event of its
// key in the slice must be reported failed too (ErrNotSent, if the adapter
// held it back). An event refused for good does not hold back its key. The
// dispatcher itself gives a Write at most one event of each key, so that a
// refusal it cannot trust (one that comes as shutdown cancels writes) never
// leaves a later version at the broker ahead of the one it keeps; other
// callers may pass several. A snapshot marker comes alone in its Write,
// once everything before it in its resource was acknowledged or refused,
// so an adapter need not order a marker against other keys.
//
// Write is called concurrently from several shards, and must not keep the
// slice after it returns: the dispatcher reuses it.
//
// Close flushes and releases the connection. It is called once, after the
// last Write has returned.
type Sink interface {
	Connect(ctx context.Context) error
	Write(ctx context.Context, events []*encoding.Event) error
	Close(ctx context.Context) error
}

// ErrPermanent marks a failure that no retry can cure (the broker refused an
// oversized event, say). The dispatcher logs it, counts it and moves on
// rather than stalling every later event of the shard.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds.
func Permanent(err error) error {
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// ErrPartStalled marks an event that failed because the part of the sink it
// goes to (a Kafka partition whose leader stopped answering) is stalled
// while the rest of the sink may take events. It is transient. A Write
// whose new events all failed with it says nothing about the sink as a
// whole, so the dispatcher holds those keys for their retry and goes on
// with the others, rather than wait as it does for a sink that is down.
var ErrPartStalled = errors.New("part of the sink stalled")

// ErrTooLarge marks a broker's refusal of an event, or of a request, because
// of its size. Each adapter recognises its broker's own error for that
// (kafka-go's MessageSizeTooLarge, nats.go's ErrMaxPayload, ...) and wraps
// it with TooLarge, so that callers on either side of the adapter test
// errors.Is(err, ErrTooLarge) rather than knowing every broker's errors.
var ErrTooLarge = errors.New("too large for the broker")

// TooLarge wraps err so that errors.Is(err, ErrTooLarge) holds; its message
// stays err's, and err stays reachable with errors.Is and errors.As. A nil
// err stays nil.
func TooLarge(err error) error {
	if err == nil {
		return nil
	}
	return tooLargeError{err}
}

type tooLargeError struct{ err error }

func (e tooLargeError) Error() string   { return e.err.Error() }
func (e tooLargeError) Unwrap() []error { return []error{ErrTooLarge, e.err} }

// Deps are what the process gives adapters: a place for the stdout sink to
// write and the logger.
type Deps struct {
	Stdout io.Writer
	Logger *slog.Logger
}

// Spec describes one sink type: its config block and how a sink of that
// type is built. Each adapter package exports its Spec; the program lists
// the specs it ships in one Registry. Optional capabilities of a type (a
// reader of its own stream, its metrics) are found by type assertion on the
// block or on the sink, so the Spec stays this small.
type Spec struct {
	// Type is the value of a sink's type field, and the name of its block.
	Type string
	// NewConfig returns a new, zero block, which config decodes the file's
	// block into.
	NewConfig func() config.SinkBlock
	// New builds a sink called name from its block. The block has been
	// validated, but may be nil or not yet defaulted when the configuration
	// was built in code; New defaults a copy.
	New func(name string, block config.SinkBlock, deps Deps) (Sink, error)
	// Schema is the JSON Schema of the block, for the Helm chart's
	// values.schema.json (make manifests writes it there). It need not
	// repeat every rule Validate has; kubewire checks the block in full.
	Schema string
}

// NewSpec is the Spec of a sink type whose block is a C, with newSink
// receiving a defaulted copy of the block as a *C.
func NewSpec[C any, PC interface {
	*C
	config.SinkBlock
}](typ, schema string, newSink func(name string, cfg PC, deps Deps) (Sink, error)) Spec {
	return Spec{
		Type:      typ,
		NewConfig: func() config.SinkBlock { return PC(new(C)) },
		New: func(name string, block config.SinkBlock, deps Deps) (Sink, error) {
			c := new(C)
			switch b := block.(type) {
			case nil:
			case PC:
				if b != nil {
					*c = *b
				}
			default:
				return nil, fmt.Errorf("the %s block is a %T, not a %T", typ, block, PC(c))
			}
			PC(c).Default()
			return newSink(name, PC(c), deps)
		},
		Schema: schema,
	}
}

// Registry maps a sink type (the config's `type`) to its Spec. It is the
// config.SinkTypes that loading decodes sink blocks with.
type Registry map[string]Spec

var _ config.SinkTypes = Registry(nil)

// NewRegistry returns a registry of specs, and registers the metric
// collectors of each type whose block has them (Collectors()
// []prometheus.Collector), so a type's metrics are served from the start,
// at zero, whether or not a sink of it is configured.
func NewRegistry(specs ...Spec) Registry {
	r := Registry{}
	for _, s := range specs {
		r[s.Type] = s
		if c, ok := s.NewConfig().(interface{ Collectors() []prometheus.Collector }); ok {
			metrics.Register(c.Collectors()...)
		}
	}
	return r
}

// New builds the sink cfg describes.
func (r Registry) New(cfg config.Sink, deps Deps) (Sink, error) {
	spec, ok := r[cfg.Type]
	if !ok {
		return nil, fmt.Errorf("sink %q: no adapter for type %q (have %v)", cfg.Name, cfg.Type, r.Types())
	}
	s, err := spec.New(cfg.Name, cfg.Block, deps)
	if err != nil {
		return nil, fmt.Errorf("sink %q (%s): %w", cfg.Name, cfg.Type, err)
	}
	return s, nil
}

// NewBlock returns a new, zero block of type typ.
func (r Registry) NewBlock(typ string) (config.SinkBlock, bool) {
	spec, ok := r[typ]
	if !ok {
		return nil, false
	}
	return spec.NewConfig(), true
}

// Types lists the registered sink types, sorted.
func (r Registry) Types() []string {
	ts := make([]string, 0, len(r))
	for t := range r {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// Reader is implemented by a sink's config block when its broker keeps what
// the sink sent, so that `kubewire verify` can read it back.
type Reader interface {
	// ReadBack reads everything the broker holds of the sink's stream for
	// routes, from the beginning up to where it ended when reading began,
	// and calls fn for each record in order within its partition.
	ReadBack(ctx context.Context, routes []config.Route, fn func(Record) error) error
}

// Record is one record read back from a sink's stream.
type Record struct {
	// Partition names the ordered part of the stream the record is in (a
	// topic's partition, say); the consumer's rule applies per partition.
	Partition string
	// Key is the record's partition key.
	Key string
	// Event is the event, or nil for a tombstone of Key.
	Event *event.Event
}
