package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
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
	// fromEvent marks a binary-mode record, whose headers are ev's
	// attributes and extensions, written straight from ev into the batch
	// (appendEventHeaders) instead of held in headers. hcount and hbytes
	// are their number and the bytes of their names and values, the time's
	// at its longest, for sizing the record only.
	fromEvent      bool
	hcount, hbytes int
	time           time.Time
	kind           string
	ev             *encoding.Event // nil for a tombstone
	// src is the event the record stands for (a tombstone's is its
	// delete); with the kind it names the record in partition.resolved.
	src *encoding.Event
	// idx is the index of src in the Write's events, whose outcome the
	// record's decides.
	idx int
	// object is the partition key as a string, for an event's record.
	object string
}

func (r *record) size() int {
	n := len(r.key) + len(r.value) + 32 + r.hbytes + 4*r.hcount
	for _, h := range r.headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}

func (s *Sink) newRecord(ev *encoding.Event) record {
	kind := kindEvent
	if isMarker(ev) {
		kind = kindMarker
	}
	object := ev.Extension(encoding.ExtPartitionKey)
	r := record{time: ev.Time(), kind: kind, ev: ev, src: ev, object: object}
	if s.structured {
		m := EncodeMessage(ev, true)
		r.key, r.value, r.headers = m.Key, m.Value, m.Headers
		return r
	}
	// A binary-mode record is ev's data and headers as they are: nothing
	// is copied until the batch is written.
	if pk, ok := ev.Lookup(encoding.ExtPartitionKey); ok {
		r.key = readOnlyBytes(pk)
	}
	if len(ev.Data()) > 0 {
		r.value = ev.Data()
	}
	r.fromEvent = true
	r.hcount, r.hbytes = eventHeadersSize(ev)
	return r
}

// headerList is r's headers as kafka-go takes them, built from the event
// for a binary-mode record: for kafka-go's encoder, which compressed batches
// and the tests' oracles go through.
func (r *record) headerList() []kafkago.Header {
	if r.fromEvent {
		return encodeBinary(r.ev).Headers
	}
	return r.headers
}

// isMarker reports whether ev frames the stream rather than describing an
// object: a snapshot marker, a gap or a resource's removal. It goes to
// every partition of its topic, as informer.Change.IsMarker says.
func isMarker(ev *encoding.Event) bool {
	t := ev.Type()
	return t == encoding.TypeSnapshotStarted || t == encoding.TypeSnapshotCompleted || t == encoding.TypeGap || t == encoding.TypeRemoved
}

// group is the part of one Write that goes to one partition, in order.
type group struct {
	p       *partition
	records []record
}

// Write produces events in order and reports each one's outcome (a
// sinks.BatchError names the failed ones). An object's event goes to its
// key's partition, followed by a tombstone if it is a delete and
// tombstones are on; a snapshot marker or a gap goes to every partition of
// its topic, so a consumer of any one partition sees the snapshot's frame
// and hears of the gap. An event is acknowledged once every record of it
// is. A record a partition acknowledged is never sent to it again as a new
// record: the retry of an event that failed elsewhere (a marker), or whose
// later record failed (a delete's tombstone), skips what the partition
// holds (placed.go).
//
// Per-key order: all events of a key go to one partition, whose loop sends
// them in order and stops at the first failure; every record after it
// fails with it. An event whose topic cannot be looked up fails with every
// later event of that topic, hence of its key.
func (s *Sink) Write(ctx context.Context, events []*encoding.Event) error {
	s.mu.Lock()
	closed := s.closed || s.client == nil
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: write before Connect or after Close: %w", ErrClosed)
	}
	o := outcomes{n: len(events)}
	var groups []*group
	index := map[*partition]*group{}
	add := func(p *partition, r record, share int) {
		g := index[p]
		if g == nil {
			g = &group{p: p, records: make([]record, 0, share)}
			index[p] = g
			groups = append(groups, g)
		}
		g.records = append(g.records, r)
	}
	// topicErr keeps a topic that could not be looked up failing for the
	// rest of this Write: its later events must not overtake the failed
	// ones, and one lookup per event would only repeat the failure.
	var topicErr map[string]error
	// tracked are the indexes of the events with records that partitions
	// may already hold (placed.go): the markers, and deletes whose event
	// an earlier Write got acknowledged.
	var tracked []int
	for i, ev := range events {
		name, err := s.topicFor(ev)
		if err != nil {
			o.fail(i, sinks.Permanent(err))
			continue
		}
		if err := topicErr[name]; err != nil {
			o.fail(i, err)
			continue
		}
		t, err := s.partitions(ctx, name)
		if err != nil {
			if topicErr == nil {
				topicErr = map[string]error{}
			}
			topicErr[name] = err
			o.fail(i, err)
			continue
		}
		r := s.newRecord(ev)
		r.idx = i
		share := groupShare(len(events)-i, len(t.parts))
		if r.kind == kindMarker {
			tracked = append(tracked, i)
			o.markers = true
			held := s.placed.acked(ev)
			for _, p := range t.parts {
				if _, ok := held[p.id]; !ok {
					add(p, r, share)
				}
			}
			continue
		}
		p := t.parts[s.balancer.Balance(kafkago.Message{Key: r.key}, t.ids...)]
		if !s.tombstones || ev.Type() != encoding.TypeDeleted {
			add(p, r, share)
			continue
		}
		if _, held := s.placed.acked(ev)[p.id]; held {
			// The retry of a delete whose event went out in a request that
			// was acknowledged, and its tombstone in one that was not:
			// only the tombstone is left to send.
			tracked = append(tracked, i)
		} else {
			add(p, r, share)
		}
		add(p, record{key: r.key, time: r.time, kind: kindTombstone, src: ev, idx: i}, share)
	}
	s.send(ctx, groups, &o)
	for _, i := range tracked {
		// Written everywhere, or never to be: no retry will ask again.
		if err := o.err(i); err == nil || errors.Is(err, sinks.ErrPermanent) {
			s.placed.forget(events[i])
		}
	}
	return o.be.ErrorOrNil()
}

// groupShare is the capacity of a partition's records in a Write, given
// when the partition first comes up with left events still to place over
// parts partitions: an even share and half as much again, since keys do not
// spread evenly. Grown from nothing instead, the records' arrays would add
// up to about four times the records of a Write of a hundred events over a
// few partitions.
func groupShare(left, parts int) int {
	return (left+left/2)/parts + 1
}

// outcomes gathers the failures of one Write's events.
type outcomes struct {
	n  int
	be *sinks.BatchError
	// markers: the Write holds a snapshot marker, whose partitions are
	// noted as they acknowledge it (placed.go). Most Writes hold none,
	// and skip that walk over their records.
	markers bool
}

// fail records that the event at index i failed. An event with records in
// several partitions (a marker) may fail in more than one; a transient
// failure is kept over a refusal, since the event is written again anyway.
func (o *outcomes) fail(i int, err error) {
	if o.be == nil {
		o.be = sinks.NewBatchError(o.n)
	}
	if prev := o.be.Err(i); prev != nil && !errors.Is(prev, sinks.ErrPermanent) {
		return
	}
	o.be.Failed(i, err)
}

// err is the failure recorded for the event at index i, or nil.
func (o *outcomes) err(i int) error {
	if o.be == nil {
		return nil
	}
	return o.be.Err(i)
}

// failFrom fails the events of g's records from the first-th on: records
// that failed, or were never sent because one before them did.
func (o *outcomes) failFrom(g *group, first int, err error) {
	for _, r := range g.records[first:] {
		o.fail(r.idx, err)
	}
}

// send hands every group to its partition's loop, waits for all of them,
// and records in o the events of what was not acknowledged. A group the
// broker refused as too large is sent again record by record, so that only
// the oversized events fall back to a reference payload.
func (s *Sink) send(ctx context.Context, groups []*group, o *outcomes) {
	units := make([]*unit, len(groups))
	now := time.Now()
	for i, g := range groups {
		if g.p.stalled(now) {
			// Queued behind a request that gets no answer, the records
			// would only wait there; the dispatcher writes them again.
			o.failFrom(g, 0, g.p.stallError(sinks.ErrNotSent))
			continue
		}
		units[i] = newUnit(g.records)
		g.p.submit(units[i])
	}
	var tooLarge []int
	for i, u := range units {
		if u == nil {
			continue
		}
		err := u.wait(ctx, groups[i].p)
		// sent is the unit's acknowledged prefix, set before its outcome
		// was reported (0 if it was withdrawn). A Write that stopped
		// waiting does not know it: the loop may still be setting it.
		sent := 0
		if !errors.Is(err, errStalled) {
			sent = u.sent
		}
		if o.markers {
			s.notePlacedMarkers(groups[i].p, groups[i].records[:sent])
		}
		switch {
		case err == nil:
		case errors.Is(err, sinks.ErrTooLarge):
			tooLarge = append(tooLarge, i)
		default:
			s.notePlacedEvent(groups[i], sent)
			o.failFrom(groups[i], sent, err)
		}
	}
	for _, i := range tooLarge {
		s.sendOneByOne(ctx, groups[i], units[i].sent, o)
	}
}

// notePlacedMarkers records the markers among recs, which p acknowledged,
// so that a retry of their Write does not send them to p again.
func (s *Sink) notePlacedMarkers(p *partition, recs []record) {
	for i := range recs {
		if recs[i].kind == kindMarker {
			s.placed.add(recs[i].src, p.id)
		}
	}
}

// notePlacedEvent is called when g's records fail from first on, those
// before it acknowledged. If the first that failed is a delete's tombstone
// and the one before it that delete's event, the delete fails, but its
// event is in the log: it is recorded so that the delete's retry sends only
// the tombstone. Only a delete has two records in one partition, so no
// other event can be split like this.
func (s *Sink) notePlacedEvent(g *group, first int) {
	if first == 0 || first >= len(g.records) {
		return
	}
	prev := &g.records[first-1]
	if prev.idx != g.records[first].idx || prev.kind != kindEvent {
		return
	}
	s.placed.add(prev.src, g.p.id)
}

// sendOneByOne sends g's records after the first skip (which went out
// already) one request each, in order. An event that is too large on its
// own is replaced by its reference event; if even that is refused, the
// event is refused for good, alone: its tombstone is not sent, and the
// records after it are. A transient failure stops the group: that record
// and every later one fail.
func (s *Sink) sendOneByOne(ctx context.Context, g *group, skip int, o *outcomes) {
	refused := -1 // the event whose records are no longer sent
	for j := skip; j < len(g.records); j++ {
		r := g.records[j]
		if r.idx == refused {
			continue
		}
		u := newUnit([]record{r})
		g.p.submit(u)
		err := u.wait(ctx, g.p)
		if err == nil {
			if o.markers {
				s.notePlacedMarkers(g.p, u.records[:u.sent])
			}
			continue
		}
		if !errors.Is(err, sinks.ErrTooLarge) || r.ev == nil {
			s.notePlacedEvent(g, j)
			o.failFrom(g, j, err)
			return
		}
		ref, rerr := encoding.ReferenceEvent(r.ev)
		if rerr != nil {
			o.fail(r.idx, sinks.Permanent(fmt.Errorf("kafka: event %s: %w, and %w", r.ev.ID(), err, rerr)))
			refused = r.idx
			continue
		}
		rr := s.newRecord(ref)
		rr.src, rr.idx = r.src, r.idx
		u = newUnit([]record{rr})
		g.p.submit(u)
		rerr = u.wait(ctx, g.p)
		switch {
		case rerr == nil:
			mOversized.WithLabelValues(s.name, "reference").Inc()
			s.log.Warn("event too large for Kafka; sent a reference to the object instead",
				"id", r.ev.ID(), "partitionkey", string(r.key), "topic", g.p.topic, "bytes", r.size(), "err", err)
		case errors.Is(rerr, sinks.ErrTooLarge):
			mOversized.WithLabelValues(s.name, "dropped").Inc()
			o.fail(r.idx, sinks.Permanent(fmt.Errorf("kafka: event %s is too large for topic %s even as a reference (%d bytes): %w",
				r.ev.ID(), g.p.topic, rr.size(), rerr)))
			refused = r.idx
		default:
			// The reference stands in this record's place in the group.
			o.fail(r.idx, rerr)
			o.failFrom(g, j+1, rerr)
			return
		}
	}
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
