package nats

// Events too large for the server: reference events, and the errors that
// say so.

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks"
)

// referenceMessage is the message of ev's reference event
// (encoding.ReferenceEvent), which takes the place of ev when ev is too
// large. An error is permanent: retrying cannot make it smaller.
func (s *Sink) referenceMessage(ev *encoding.Event) (*natsgo.Msg, error) {
	ref, err := encoding.ReferenceEvent(ev)
	if err == nil {
		var m *natsgo.Msg
		if m, err = s.message(ref); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no reference event: %w", err)
}

// sentReference counts and logs an event that went out as its reference
// event because its full message was too large. The log names the event,
// never its data.
func (s *Sink) sentReference(ev *encoding.Event, full *natsgo.Msg) {
	mOversized.WithLabelValues(s.name, "reference").Inc()
	pk := ev.Extension(encoding.ExtPartitionKey)
	s.log.Warn("event too large for NATS; sent a reference to the object instead",
		"id", ev.ID(), "partitionkey", pk, "subject", full.Subject, "bytes", msgSize(full))
}

// msgSize is about what a message counts against max_payload: its data and
// headers.
func msgSize(m *natsgo.Msg) int {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// isTooLarge recognises nats.go's refusals of a message as too large: the
// client's, against the server's max_payload, and the stream's, against its
// max_msg_size. What leaves the adapter carries sinks.ErrTooLarge instead
// (tooLarge).
func isTooLarge(err error) bool {
	if errors.Is(err, natsgo.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// tooLarge marks err with sinks.ErrTooLarge when NATS refused a message as
// too large, and returns every other err as it is.
func tooLarge(err error) error {
	if isTooLarge(err) && !errors.Is(err, sinks.ErrTooLarge) {
		return sinks.TooLarge(err)
	}
	return err
}

// reason is the bounded metric label of a publish error.
func reason(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case isTooLarge(err):
		return "too_large"
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, natsgo.ErrReconnectBufExceeded):
		return "buffer_full"
	case errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrNoServers):
		return "disconnected"
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no_stream"
	case errors.Is(err, natsgo.ErrPermissionViolation):
		return "permission"
	case errors.As(err, &apiErr):
		return "api"
	}
	return "other"
}
