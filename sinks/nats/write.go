package nats

// Writing: encoding the messages, the per-event outcome of a Write, and
// core NATS publishes.

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
)

// Write publishes events in order and reports each one's outcome (a
// sinks.BatchError names the failed ones): an event is acknowledged once
// the server has taken it, with a PubAck in JetStream mode, by a completed
// flush in core mode. With jetstream.kv, the events the stream took are
// then written to the bucket too (writeKV), and an event is acknowledged
// only once both have taken it.
func (s *Sink) Write(ctx context.Context, events []*encoding.Event) error {
	o := outcomes{n: len(events)}
	msgs := make([]*natsgo.Msg, len(events))
	for i, ev := range events {
		m, err := s.message(ev)
		if err != nil {
			// Retrying cannot change how an event encodes.
			o.fail(i, sinks.Permanent(fmt.Errorf("nats: event %s: %w", ev.ID(), err)))
			continue
		}
		msgs[i] = m
	}
	nc, js, err := s.conn(ctx)
	if err != nil {
		if o.be == nil {
			return err
		}
		o.failRest(0, err)
		return o.be
	}
	if js == nil {
		s.writeCore(ctx, nc, events, msgs, &o)
		return o.be.ErrorOrNil()
	}
	s.writeJetStream(ctx, js, events, msgs, &o)
	if s.cfg.JetStream.KV != nil {
		s.mu.Lock()
		kv := s.kv
		s.mu.Unlock()
		s.writeKV(ctx, js, kv, events, &o)
	}
	return o.be.ErrorOrNil()
}

// outcomes gathers the failures of one Write's events.
type outcomes struct {
	n  int
	be *sinks.BatchError
}

func (o *outcomes) fail(i int, err error) {
	if o.be == nil {
		o.be = sinks.NewBatchError(o.n)
	}
	o.be.Failed(i, err)
}

func (o *outcomes) failed(i int) bool { return o.be != nil && o.be.Err(i) != nil }

// failedBefore reports whether an event before the i-th failed.
func (o *outcomes) failedBefore(i int) bool {
	for j := range i {
		if o.failed(j) {
			return true
		}
	}
	return false
}

// failRest fails, with err, every event from the first-th on that has not
// failed already.
func (o *outcomes) failRest(first int, err error) {
	for i := first; i < o.n; i++ {
		if !o.failed(i) {
			o.fail(i, err)
		}
	}
}

// holdBack fails every acknowledged event that follows, in events, an
// event of its key that failed transiently: it may have overtaken that
// event (in the bucket, whose writes are not ordered per key), so it is
// written again after it.
func (o *outcomes) holdBack(events []*encoding.Event) {
	if o.be == nil {
		return
	}
	var failedKeys map[string]bool
	for i, ev := range events {
		k := ev.Extension(encoding.ExtPartitionKey)
		err := o.be.Err(i)
		switch {
		case err == nil && failedKeys[k]:
			o.fail(i, fmt.Errorf("nats: event %s follows a failed event of its key: %w", ev.ID(), sinks.ErrNotSent))
		case err != nil && !errors.Is(err, sinks.ErrPermanent):
			if failedKeys == nil {
				failedKeys = map[string]bool{}
			}
			failedKeys[k] = true
		}
	}
}

func (s *Sink) message(ev *encoding.Event) (*natsgo.Msg, error) {
	subject, err := s.tmpl.Subject(ev)
	if err != nil {
		return nil, err
	}
	var m *natsgo.Msg
	if s.cfg.ContentMode == config.ContentModeStructured {
		m, err = structuredMessage(subject, ev)
	} else {
		m = binaryMessage(subject, ev)
	}
	if err != nil {
		return nil, err
	}
	if s.cfg.Mode == ModeJetStream {
		m.Header[jetstream.MsgIDHeader] = msgID(m.Header, ev.ID())
	}
	return m, nil
}

// msgID is the value of a message's Nats-Msg-Id header: the event's id. In
// binary mode that is nearly always ce-id's value too, percent-encoding
// having nothing to escape in it, and the two headers share that value, one
// allocation fewer per message; values are only read once set (see
// specVersionValue).
func msgID(h natsgo.Header, id string) []string {
	if v := h[headerID]; len(v) == 1 && v[0] == id {
		return v
	}
	return []string{id}
}

// writeCore publishes with core NATS. Core NATS has no acknowledgement: a
// successful flush means the server has read the messages, not that anyone
// received them (no subscriber, a slow consumer or a server crash all lose
// them silently). That is at most once, and this mode is for automation that
// prefers latency to completeness. What the client can see — a closed
// connection, a full reconnect buffer, a flush that does not complete — is
// reported, so the dispatcher retries it (possibly repeating messages that
// sat in the reconnect buffer; they keep their ids). A message larger than
// the server's max_payload is sent as its reference event instead; only a
// reference that is too large as well is refused, permanently and alone.
// A publish that fails otherwise is the connection's failure: it fails
// every event not refused, since those before it may sit in the reconnect
// buffer with no flush that could confirm them.
func (s *Sink) writeCore(ctx context.Context, nc *natsgo.Conn, events []*encoding.Event, msgs []*natsgo.Msg, o *outcomes) {
	for i, m := range msgs {
		if m == nil {
			continue // refused already
		}
		err := tooLarge(nc.PublishMsg(m))
		if errors.Is(err, sinks.ErrTooLarge) {
			mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
			ref, rerr := s.referenceMessage(events[i])
			if rerr != nil {
				o.fail(i, sinks.Permanent(fmt.Errorf("nats: publish event %s to %q: %w, and %w", events[i].ID(), m.Subject, err, rerr)))
				continue
			}
			if err = tooLarge(nc.PublishMsg(ref)); err == nil {
				s.sentReference(events[i], m)
				continue
			}
			m = ref
			if errors.Is(err, sinks.ErrTooLarge) {
				mOversized.WithLabelValues(s.name, "dropped").Inc()
				err = fmt.Errorf("even as a reference (%d bytes): %w", msgSize(ref), err)
			}
		}
		if err != nil {
			mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
			err = fmt.Errorf("nats: publish event %s to %q: %w", events[i].ID(), m.Subject, err)
			if errors.Is(err, sinks.ErrTooLarge) {
				o.fail(i, sinks.Permanent(err))
				continue
			}
			o.fail(i, err)
			o.failRest(0, fmt.Errorf("nats: not confirmed, since publishing event %s failed: %w", events[i].ID(), err))
			return
		}
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout.Duration)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
		o.failRest(0, fmt.Errorf("nats: flush %d messages: %w", len(msgs), err))
	}
}
