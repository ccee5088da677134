package httpsink

import (
	"context"
	"errors"
	"fmt"
	nethttp "net/http"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
)

// Write posts the events in order and reports each one's outcome (see
// sinks.Sink). A refused event is refused alone and the Write goes on; any
// other failure stops it, and every event after the failed ones is reported
// not sent, so no later change of a key can overtake an earlier one.
func (s *Sink) Write(ctx context.Context, events []*encoding.Event) error {
	c := s.live.Load()
	if c == nil {
		if s.closed.Load() {
			return fmt.Errorf("http: write after Close: %w", ErrClosed)
		}
		return errNotConnected
	}
	res := sinks.NewBatchError(len(events))
	if s.batch != nil {
		s.writeBatched(ctx, c, events, res)
		return res.ErrorOrNil()
	}
	for i, ev := range events {
		if err := s.deliver(ctx, c, ev, nil); err != nil && !failed(res, i, i+1, err) {
			break
		}
	}
	return res.ErrorOrNil()
}

// failed records err for the events from..to-1 of res. It reports whether
// the Write may go on: a permanent refusal holds back nothing, while after
// any other failure every later event is recorded as not sent.
func failed(res *sinks.BatchError, from, to int, err error) bool {
	for i := from; i < to; i++ {
		res.Failed(i, err)
	}
	if errors.Is(err, sinks.ErrPermanent) {
		return true
	}
	for i := to; i < res.Len(); i++ {
		res.Failed(i, sinks.ErrNotSent)
	}
	return false
}

// writeBatched packs consecutive events into requests of at most
// batch.maxEvents events and batch.maxBytes bytes, in order. A request the
// receiver refuses (as too large, or for good) is sent again one event per
// request, since none of its events was taken and the receiver did not say
// which one it refused; an event alone too large goes as its reference
// event.
func (s *Sink) writeBatched(ctx context.Context, c *nethttp.Client, events []*encoding.Event, res *sinks.BatchError) {
	bodies := make([][]byte, len(events))
	for i, ev := range events {
		b, err := structuredBody(s.withOverrides(ev))
		if err != nil {
			// Retrying cannot change how an event encodes; it is left
			// out of every request.
			res.Failed(i, sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err)))
			continue
		}
		bodies[i] = b
	}
	one := func(i int) bool {
		if err := s.deliver(ctx, c, events[i], bodies[i]); err != nil {
			return failed(res, i, i+1, err)
		}
		return true
	}
	for start := 0; start < len(events); {
		if bodies[start] == nil {
			start++
			continue
		}
		end, size := start+1, 2+len(bodies[start])
		for end < len(events) && bodies[end] != nil && end-start < s.batch.MaxEvents && size+1+len(bodies[end]) <= s.batch.MaxBytes {
			size += 1 + len(bodies[end])
			end++
		}
		if end-start == 1 {
			if !one(start) {
				return
			}
			start = end
			continue
		}
		r := &request{contentType: batchValue, body: batchBody(bodies[start:end])}
		err := s.post(ctx, c, r, events[start:end])
		switch {
		case err == nil:
		case errors.Is(err, sinks.ErrTooLarge), errors.Is(err, sinks.ErrPermanent):
			for i := start; i < end; i++ {
				if !one(i) {
					return
				}
			}
		default:
			failed(res, start, end, err)
			return
		}
		start = end
	}
}

// deliver sends one event; if the receiver refuses it as too large, its
// reference event goes in its place (encoding.ReferenceEvent: the same id,
// data that only names the object). Nothing newer of its key has been sent
// meanwhile, so the key's order holds. Only a reference refused as well, or
// an event that has none, is a permanent failure. structured, when not nil,
// is ev already in the JSON event format.
func (s *Sink) deliver(ctx context.Context, c *nethttp.Client, ev *encoding.Event, structured []byte) error {
	err := s.send(ctx, c, ev, structured)
	if err == nil || !errors.Is(err, sinks.ErrTooLarge) || errors.Is(err, sinks.ErrPermanent) {
		return err
	}
	ref, rerr := encoding.ReferenceEvent(ev)
	if rerr != nil {
		return sinks.Permanent(fmt.Errorf("%w, and %w", err, rerr))
	}
	switch rerr := s.send(ctx, c, ref, nil); {
	case rerr == nil:
		s.log.Warn("event too large for the receiver; sent a reference to the object instead",
			"id", ev.ID(), "partitionkey", ev.Extension(encoding.ExtPartitionKey), "bytes", len(ev.Data()), "err", err)
		return nil
	case errors.Is(rerr, sinks.ErrTooLarge):
		return sinks.Permanent(fmt.Errorf("http: event %s is too large for the receiver even as a reference: %w", ev.ID(), rerr))
	default:
		return rerr
	}
}

// send posts one event in the sink's content mode; the batched mode sends
// it as a batch of one, so that the receiver sees one format.
func (s *Sink) send(ctx context.Context, c *nethttp.Client, ev *encoding.Event, structured []byte) error {
	one := [1]*encoding.Event{ev}
	if s.mode == config.ContentModeBinary {
		ct, err := binaryContentType(ev)
		if err != nil {
			return sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err))
		}
		return s.post(ctx, c, &request{binary: ev, contentType: ct, body: ev.Data()}, one[:])
	}
	if structured == nil {
		var err error
		if structured, err = structuredBody(s.withOverrides(ev)); err != nil {
			return sinks.Permanent(fmt.Errorf("http: event %s: %w", ev.ID(), err))
		}
	}
	r := &request{contentType: structuredValue, body: structured}
	if s.mode == ContentModeBatched {
		r.contentType, r.body = batchValue, batchBody([][]byte{structured})
	}
	return s.post(ctx, c, r, one[:])
}

// withOverrides is ev with K_CE_OVERRIDES' extensions, for the structured
// formats; binary mode adds their headers instead and needs no copy.
func (s *Sink) withOverrides(ev *encoding.Event) *encoding.Event {
	if len(s.overrides) == 0 {
		return ev
	}
	c := ev.Clone()
	for _, o := range s.overrides {
		c.SetExtension(o.name, o.value)
	}
	return c
}
