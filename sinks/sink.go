// Package sinks holds the contract between kubewire's delivery engine and the
// adapters that talk to brokers, the registry of adapters, and the ordered
// dispatcher that owns retries, ordering and buffering for every adapter.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/config"
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
// dispatcher checks this, and writes an event acknowledged against it again
// after the one it overtook, so that the key ends at its newest change. A
// snapshot marker comes alone in its Write, once everything before it in
// its resource was acknowledged or refused, so an adapter need not order a
// marker against other keys.
//
// Write is called concurrently from several shards, and must not keep the
// slice after it returns: the dispatcher reuses it.
//
// Close flushes and releases the connection. It is called once, after the
// last Write has returned.
type Sink interface {
	Connect(ctx context.Context) error
	Write(ctx context.Context, events []*event.Event) error
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

// Factory builds an adapter from its validated config.
type Factory func(cfg config.Sink, deps Deps) (Sink, error)

// Registry maps a sink type (the config's `type`) to its factory.
type Registry map[string]Factory

// New builds the sink cfg describes.
func (r Registry) New(cfg config.Sink, deps Deps) (Sink, error) {
	f, ok := r[cfg.Type]
	if !ok {
		return nil, fmt.Errorf("sink %q: no adapter for type %q (have %v)", cfg.Name, cfg.Type, r.Types())
	}
	s, err := f(cfg, deps)
	if err != nil {
		return nil, fmt.Errorf("sink %q (%s): %w", cfg.Name, cfg.Type, err)
	}
	return s, nil
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
