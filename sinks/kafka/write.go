package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/metrics"
	"github.com/kubewire/kubewire/sinks"
)

// Record kinds, for metrics.
const (
	kindEvent     = "event"
	kindTombstone = "tombstone"
	kindMarker    = "marker"
)

// record is one Kafka record before it is handed to kafka-go. kafka-go's
// Record values are readers that a request consumes, so a fresh one is built
// for every attempt.
type record struct {
	key, value []byte
	headers    []kafkago.Header
	time       time.Time
	kind       string
	ev         *event.Event // nil for a tombstone
	// src is the event the record stands for (a tombstone's is its delete),
	// and with the partition and kind it names the record in Sink.acked.
	src *event.Event
	// object is the partition key as a string, for an event's record.
	object string
}

func (r *record) size() int {
	n := len(r.key) + len(r.value) + 32
	for _, h := range r.headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}

func (s *Sink) newRecord(ev *event.Event) (record, error) {
	m, err := EncodeMessage(ev, s.structured)
	if err != nil {
		return record{}, err
	}
	kind := kindEvent
	if isMarker(ev) {
		kind = kindMarker
	}
	object, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	return record{key: m.Key, value: m.Value, headers: m.Headers, time: ev.Time(), kind: kind, ev: ev, src: ev, object: object}, nil
}

// ackKey names one record of one event in one partition.
type ackKey struct {
	ev   *event.Event
	p    *partition
	kind string
}

// Records acknowledged by a Write that failed as a whole are remembered
// until the dispatcher's retry of that Write succeeds, and the retry does
// not send them again. A retry then starts at the first record whose fate
// is unknown, so a repeated event directly follows its first copy in its
// object's sequence, instead of the whole Write appearing twice
// (v1 v2 v1 v2). The dispatcher retries the same events, so the event
// pointers identify them.
func (s *Sink) isAcked(k ackKey) bool {
	if s.nAcked.Load() == 0 {
		return false
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	_, ok := s.acked[k]
	return ok
}

// remember records what a failed Write got acknowledged.
func (s *Sink) remember(keys []ackKey) {
	if len(keys) == 0 {
		return
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	for _, k := range keys {
		s.acked[k] = struct{}{}
	}
	s.nAcked.Store(int64(len(s.acked)))
}

// forget drops what a Write that has now succeeded had remembered.
func (s *Sink) forget(keys []ackKey) {
	if len(keys) == 0 {
		return
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	for _, k := range keys {
		delete(s.acked, k)
	}
	s.nAcked.Store(int64(len(s.acked)))
}

func isMarker(ev *event.Event) bool {
	t := ev.Type()
	return t == encoding.TypeSnapshotStarted || t == encoding.TypeSnapshotCompleted
}

// group is the part of one Write that goes to one partition, in order.
type group struct {
	p       *partition
	records []record
}

// Write produces events in order and returns once Kafka acknowledged all of
// them. An object's event goes to its key's partition, followed by a
// tombstone if it is a delete and tombstones are on; a snapshot marker goes
// to every partition of its topic, so a consumer of any one partition sees
// the snapshot's frame.
func (s *Sink) Write(ctx context.Context, events []*event.Event) error {
	s.mu.Lock()
	closed := s.closed || s.client == nil
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: write before Connect or after Close: %w", ErrClosed)
	}
	var groups []*group
	var done []ackKey // what this Write had acknowledged before
	index := map[*partition]*group{}
	add := func(p *partition, r record) {
		if k := (ackKey{r.src, p, r.kind}); s.isAcked(k) {
			done = append(done, k)
			return
		}
		g := index[p]
		if g == nil {
			g = &group{p: p}
			index[p] = g
			groups = append(groups, g)
		}
		g.records = append(g.records, r)
	}
	for _, ev := range events {
		name, err := s.topicFor(ev)
		if err != nil {
			return sinks.Permanent(err)
		}
		t, err := s.partitions(ctx, name)
		if err != nil {
			return err
		}
		r, err := s.newRecord(ev)
		if err != nil {
			return sinks.Permanent(err)
		}
		if r.kind == kindMarker {
			for _, p := range t.parts {
				add(p, r)
			}
			continue
		}
		p := t.parts[s.balancer.Balance(kafkago.Message{Key: r.key}, t.ids...)]
		add(p, r)
		if s.tombstones && ev.Type() == encoding.TypeDeleted {
			add(p, record{key: r.key, time: r.time, kind: kindTombstone, src: ev})
		}
	}
	if acked, err := s.send(ctx, groups); err != nil {
		s.remember(acked)
		return err
	}
	s.forget(done)
	return nil
}

// send hands every group to its partition's loop and waits for all of them.
// A group the broker refused as too large is sent again record by record, so
// that only the oversized events fall back to a reference payload. It
// returns what the broker acknowledged, which matters only if it fails.
func (s *Sink) send(ctx context.Context, groups []*group) ([]ackKey, error) {
	units := make([]*unit, len(groups))
	for i, g := range groups {
		units[i] = newUnit(g.records)
		g.p.submit(units[i])
	}
	var errs []error
	var acked []ackKey
	var tooLarge []int
	for i, u := range units {
		err := u.wait(ctx)
		// sent is the unit's acknowledged prefix, set before its outcome
		// was reported (0 if it was withdrawn).
		for _, r := range groups[i].records[:u.sent] {
			acked = append(acked, ackKey{r.src, groups[i].p, r.kind})
		}
		switch {
		case err == nil:
		case errors.Is(err, sinks.ErrTooLarge):
			tooLarge = append(tooLarge, i)
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return acked, errors.Join(errs...)
	}
	for _, i := range tooLarge {
		if err := s.sendOneByOne(ctx, groups[i], units[i].sent, &acked); err != nil {
			errs = append(errs, err)
		}
	}
	return acked, errors.Join(errs...)
}

// sendOneByOne sends g's records after the first skip (which went out
// already) one request each, in order, adding each acknowledged one to
// acked. An event that is too large on its own is replaced by its reference
// event; if even that is refused, the rest of the group is not sent and the
// error is permanent, so the dispatcher drops only that event and sends the
// rest again.
func (s *Sink) sendOneByOne(ctx context.Context, g *group, skip int, acked *[]ackKey) error {
	for _, r := range g.records[skip:] {
		u := newUnit([]record{r})
		g.p.submit(u)
		err := u.wait(ctx)
		if err == nil || !errors.Is(err, sinks.ErrTooLarge) || r.ev == nil {
			if err != nil {
				return err
			}
			*acked = append(*acked, ackKey{r.src, g.p, r.kind})
			continue
		}
		ref, rerr := encoding.ReferenceEvent(r.ev)
		if rerr != nil {
			return sinks.Permanent(rerr)
		}
		rr, rerr := s.newRecord(ref)
		if rerr != nil {
			return sinks.Permanent(rerr)
		}
		rr.src = r.src
		u = newUnit([]record{rr})
		g.p.submit(u)
		rerr = u.wait(ctx)
		switch {
		case rerr == nil:
			*acked = append(*acked, ackKey{r.src, g.p, r.kind})
			metrics.KafkaOversized.WithLabelValues(s.name, "reference").Inc()
			s.log.Warn("event too large for Kafka; sent a reference to the object instead",
				"id", r.ev.ID(), "partitionkey", string(r.key), "topic", g.p.topic, "bytes", r.size(), "err", err)
		case errors.Is(rerr, sinks.ErrTooLarge):
			metrics.KafkaOversized.WithLabelValues(s.name, "dropped").Inc()
			return sinks.Permanent(fmt.Errorf("kafka: event %s is too large for topic %s even as a reference (%d bytes): %w",
				r.ev.ID(), g.p.topic, rr.size(), rerr))
		default:
			return rerr
		}
	}
	return nil
}

// isTooLarge recognises kafka-go's refusals of a record or a request as too
// large. Inside the adapter it classifies a produce answer; what leaves the
// partition loop carries sinks.ErrTooLarge instead (tooLarge).
func isTooLarge(err error) bool {
	return errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge)
}

// tooLarge marks err with sinks.ErrTooLarge when Kafka refused something as
// too large, and returns every other err as it is.
func tooLarge(err error) error {
	if isTooLarge(err) {
		return sinks.TooLarge(err)
	}
	return err
}

// outcome names err for a metric label from a bounded set.
func outcome(err error) string {
	var ke kafkago.Error
	if errors.As(err, &ke) {
		return strings.ToLower(strings.NewReplacer(" ", "_", "-", "_").Replace(ke.Title()))
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return "network"
	}
	return "other"
}
