package nats

// JetStream publishes: asynchronous, at most one in flight per key, each
// waiting for its PubAck.

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks"
)

// writeJetStream publishes a batch with asynchronous JetStream publishes and
// records in o each event that has no PubAck.
//
// Order. The stream stores messages in the order it receives them, and one
// connection delivers them in the order they were published. Many keys are
// in flight at once (that is the throughput), but each key has at most one
// message in flight: a key's next event is published only after the
// previous one's PubAck. So if an event fails, no later event of its key has
// been sent; they are reported failed with it (sinks.ErrNotSent), and when
// the dispatcher writes them again in order the key's events reach the
// stream in order again. Were two events of a key in flight together, the
// first could fail while the second is stored, and the retry would store
// the first after the second.
//
// A failure of one message (no stream captures its subject, a permission,
// an API error) holds back its key only. A failure that is the
// connection's (a timeout, a disconnect, a full buffer, anything unknown)
// stops the Write: nothing new is published, what is in flight is awaited
// (each resolves by ack, error, disconnect or the publish timeout), and
// every event not acknowledged is reported failed.
//
// Too large. A message refused as too large (by the client, against the
// server's max_payload, or by the stream, against its max_msg_size) is not a
// failure: its reference event takes its place, published next with the
// same Nats-Msg-Id. Nothing newer of its key was sent meanwhile, so the
// key's order holds. Only a reference that is refused too is a failure, a
// permanent one of that event alone: the key goes on.
func (s *Sink) writeJetStream(ctx context.Context, js jetstream.JetStream, events []*encoding.Event, msgs []*natsgo.Msg, o *outcomes) {
	// Each key's messages in order, as a chain: after[i] is the next
	// message of i's key, or -1. The keys' first messages are ready, in
	// order of first appearance.
	after := make([]int, len(events))
	last := make(map[string]int, len(events))
	ready := make([]int, 0, len(events))
	for i := range events {
		after[i] = -1
		if msgs[i] == nil {
			continue // refused already
		}
		k := events[i].Extension(encoding.ExtPartitionKey)
		if j, ok := last[k]; ok {
			after[j] = i
		} else {
			ready = append(ready, i)
		}
		last[k] = i
	}
	next := func(i int) {
		if j := after[i]; j >= 0 {
			ready = append(ready, j)
		}
	}

	// Buffered for every message, so the ack callbacks never block even
	// after this Write has returned. An event has at most one message
	// outstanding (its reference is published only after the full event's
	// result was taken), so one slot per event is enough.
	results := make(chan result, len(msgs))
	inFlight := 0
	acked := make([]bool, len(msgs))
	var stopped error // the connection's failure that stopped the Write
	// full holds the refused full message of an event whose reference
	// replaced it in msgs.
	full := map[int]*natsgo.Msg{}

	fail := func(i int, err error) {
		err = tooLarge(err)
		mPublishErrors.WithLabelValues(s.name, reason(err)).Inc()
		if _, ok := full[i]; !ok && errors.Is(err, sinks.ErrTooLarge) {
			ref, rerr := s.referenceMessage(events[i])
			if rerr == nil {
				full[i], msgs[i] = msgs[i], ref
				ready = append([]int{i}, ready...)
				return
			}
			err = fmt.Errorf("%w, and %w", err, rerr) // still too large: permanent
		}
		if _, ok := full[i]; ok && errors.Is(err, sinks.ErrTooLarge) {
			mOversized.WithLabelValues(s.name, "dropped").Inc()
			err = fmt.Errorf("even as a reference (%d bytes): %w", msgSize(msgs[i]), err)
		}
		ferr := fmt.Errorf("nats: event %s to %q: %w", events[i].ID(), msgs[i].Subject, err)
		if errors.Is(err, sinks.ErrTooLarge) {
			o.fail(i, sinks.Permanent(ferr))
			next(i)
			return
		}
		// The key stops here: nothing after i in its chain is published.
		o.fail(i, ferr)
		for j := after[i]; j >= 0; j = after[j] {
			o.fail(j, fmt.Errorf("nats: event %s follows a failed event of its key: %w", events[j].ID(), sinks.ErrNotSent))
		}
		if stopped == nil && stopsWrite(err) {
			stopped = ferr
		}
	}
	handle := func(r result) {
		inFlight--
		if r.err != nil {
			fail(r.index, r.err)
			return
		}
		acked[r.index] = true
		if m, ok := full[r.index]; ok {
			s.sentReference(events[r.index], m)
		}
		if r.ack.Duplicate {
			mDuplicates.WithLabelValues(s.name).Inc()
		}
		next(r.index)
	}
	// unresolved fails every event neither acknowledged nor failed yet.
	unresolved := func(err error) {
		for i := range events {
			if !acked[i] && !o.failed(i) {
				o.fail(i, err)
			}
		}
	}

	// A guard against waiting forever should an acknowledgement never be
	// resolved: the library times each publish out after publishTimeout, so
	// twice that without any progress means something is wrong.
	stall := time.NewTimer(2 * s.cfg.PublishTimeout.Duration)
	defer stall.Stop()
	for inFlight > 0 || len(ready) > 0 && stopped == nil {
		var admit chan struct{}
		if len(ready) > 0 && stopped == nil {
			admit = s.window
		}
		select {
		case admit <- struct{}{}:
			i := ready[0]
			ready = ready[1:]
			if err := s.publishAsync(js, msgs[i], results, i); err != nil {
				fail(i, err)
				continue
			}
			inFlight++
		case r := <-results:
			handle(r)
			stall.Reset(2 * s.cfg.PublishTimeout.Duration)
		case <-ctx.Done():
			unresolved(fmt.Errorf("nats: no PubAck yet: %w", ctx.Err()))
			return
		case <-stall.C:
			unresolved(fmt.Errorf("nats: no PubAck yet, and no progress for %s", 2*s.cfg.PublishTimeout.Duration))
			return
		}
	}
	if stopped != nil {
		unresolved(fmt.Errorf("nats: not published after %w: %w", stopped, sinks.ErrNotSent))
	}
}

// stopsWrite reports whether a failed publish is the connection's rather
// than its message's, so that publishing more in the same Write would
// only fail more.
func stopsWrite(err error) bool {
	switch reason(err) {
	case "no_stream", "permission", "api", "too_large":
		return false
	}
	return true
}

// publishAsync sends one message with a token of the window already taken.
// The waiter is registered first because the PubAck may arrive before
// PublishMsgAsync returns.
func (s *Sink) publishAsync(js jetstream.JetStream, m *natsgo.Msg, results chan<- result, i int) error {
	s.pendingMu.Lock()
	s.pending[m] = waiter{results: results, index: i}
	s.pendingMu.Unlock()
	s.mPending.Inc()
	if _, err := js.PublishMsgAsync(m); err != nil {
		// No callback follows a failed send: undo here.
		if _, ok := s.resolve(m); ok {
			<-s.window
		}
		return err
	}
	return nil
}

// resolve removes and returns the waiter of m, if it was not resolved
// already. It returns the waiter by value: a pointer would cost every
// message an allocation.
func (s *Sink) resolve(m *natsgo.Msg) (waiter, bool) {
	s.pendingMu.Lock()
	w, ok := s.pending[m]
	delete(s.pending, m)
	s.pendingMu.Unlock()
	if ok {
		s.mPending.Dec()
	}
	return w, ok
}

// onAck and onErr are the jetstream context's callbacks. They run on the
// library's goroutines (onErr for a timeout even under its lock), so they
// only hand the result over and never block.
func (s *Sink) onAck(_ jetstream.JetStream, m *natsgo.Msg, ack *jetstream.PubAck) {
	if w, ok := s.resolve(m); ok {
		<-s.window
		w.results <- result{index: w.index, ack: ack}
	}
}

func (s *Sink) onErr(_ jetstream.JetStream, m *natsgo.Msg, err error) {
	if w, ok := s.resolve(m); ok {
		<-s.window
		w.results <- result{index: w.index, err: err}
	}
}
