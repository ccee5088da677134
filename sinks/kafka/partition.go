package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/sinks"
)

// Unit states. A unit moves from queued to taken (by its partition loop,
// which then always reports an outcome) or to abandoned (by its Write,
// which gave up first); never both. A taken unit moves on to answered (the
// loop reported its outcome to a Write still waiting) or to left (its
// Write stopped waiting because the partition stalled): the loop then
// keeps what the broker acknowledged of it as resolved, so that the
// Write's retry does not send it again.
const (
	unitQueued int32 = iota
	unitTaken
	unitAbandoned
	unitAnswered
	unitLeft
)

// unit is one Write's records for one partition. Its records are sent
// together, in order, or not at all.
type unit struct {
	records []record
	bytes   int
	state   atomic.Int32
	done    chan error
	// sent is how many of records, from the first, the broker
	// acknowledged. The partition loop sets it before it reports on done.
	sent int
	// gap is how long after the partition's previous unit this one
	// arrived (see dense).
	gap time.Duration
}

func newUnit(records []record) *unit {
	u := &unit{records: records, done: make(chan error, 1)}
	for i := range records {
		u.bytes += records[i].size()
	}
	return u
}

// wait returns the unit's outcome. If ctx ends while the unit is still
// queued, it is withdrawn; once its request is on the wire, wait keeps
// waiting for the outcome (bounded by requestTimeout), because returning
// early would let the request land after the dispatcher moved on.
//
// The one exception is a stalled partition (see partition.stalled): a Write
// holds events of many partitions, and waiting out one whose leader stopped
// answering would hold back every other partition's next events too. The
// unit is then withdrawn if it is still queued, or left to the partition
// if it is on the wire. A left unit's records cannot land out of order:
// the partition sends nothing else until its request is answered or given
// up, a request in doubt goes out again unchanged before anything newer
// (idempotent.go), and what the broker acknowledged of a left unit is
// resolved, so the retry of its Write skips it (partition.skipResolved).
func (u *unit) wait(ctx context.Context, p *partition) error {
	select {
	case err := <-u.done:
		return err
	default:
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d := p.untilStalled(time.Now())
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case err := <-u.done:
			return err
		case <-ctx.Done():
			if u.state.CompareAndSwap(unitQueued, unitAbandoned) {
				return fmt.Errorf("kafka: withdrawn before it was sent: %w", ctx.Err())
			}
			return <-u.done
		case now := <-timer.C:
			if !p.stalled(now) {
				continue
			}
			if u.state.CompareAndSwap(unitQueued, unitAbandoned) {
				return p.stallError(sinks.ErrNotSent)
			}
			if u.state.CompareAndSwap(unitTaken, unitLeft) {
				return p.stallError(errLeftInFlight)
			}
			return <-u.done
		}
	}
}

// errLeftInFlight is the reason of events whose request was on the wire
// when their Write stopped waiting for a stalled partition: the broker may
// append them yet.
var errLeftInFlight = errors.New("its request is still in flight")

// stallAfter is how long a partition's request may go unanswered before
// Writes stop waiting for the partition: the leader waits at most
// brokerAckTimeout for its followers and then answers, so a request this
// much older than that has met a leader that stopped answering. Each Write
// reads it through Sink.stallAfter; a variable for the tests.
var stallAfter = 4 * brokerAckTimeout

// untilStalled is how long from now until p counts as stalled if its
// current request stays unanswered; stallAfter while it has none.
func (p *partition) untilStalled(now time.Time) time.Duration {
	limit := p.s.stallAfter()
	since := p.busySince.Load()
	if since == 0 {
		return limit
	}
	return max(limit-now.Sub(time.Unix(0, since)), time.Millisecond)
}

// stalled reports whether p has had a request unanswered for stallAfter.
func (p *partition) stalled(now time.Time) bool {
	since := p.busySince.Load()
	return since != 0 && now.Sub(time.Unix(0, since)) >= p.s.stallAfter()
}

// errStalled marks the events of a unit whose Write stopped waiting for its
// stalled partition. How much of the unit the broker took is not known to
// the Write: all of its events failed. It is sinks.ErrPartStalled, so
// that the dispatcher goes on with the keys of other partitions.
var errStalled = fmt.Errorf("partition stalled (%w)", sinks.ErrPartStalled)

func (p *partition) stallError(err error) error {
	return fmt.Errorf("kafka: %s[%d] has had a request unanswered for more than %v: %w: %w",
		p.topic, p.id, p.s.stallAfter(), errStalled, err)
}

// stallAfter is the package's stallAfter. A requestTimeout shorter than it
// gives a request up before it counts as stalled, and Writes wait for it.
func (s *Sink) stallAfter() time.Duration {
	return stallAfter
}

// partition owns the produce requests of one topic partition.
type partition struct {
	s     *Sink
	topic string
	id    int

	mu    sync.Mutex
	queue []*unit
	wake  chan struct{}
	// last is when the latest unit arrived (see arrive).
	last time.Time
	// busySince is when the request on the wire went out, in Unix
	// nanoseconds; 0 while none is (see stalled).
	busySince atomic.Int64

	// producer, objects (the objects in the request being built), pending
	// and resolved are used by run's goroutine only.
	producer producer
	// leader is the address of the partition's leader, "" until looked up
	// and after a failure (rawProduce).
	leader  string
	objects map[string]struct{}
	// pending is the request whose outcome is not known yet; it goes out
	// again, unchanged, before anything else (see idempotent.go).
	pending *pending
	// resolved are records that went out in a resent pending request,
	// until the retried Write that holds them reaches the loop.
	resolved map[recordKey]struct{}
	// spare is a batch that was answered and resolved, kept so that the
	// next batch reuses its storage (see recycle). It is never the pending
	// batch. spareTimer lets a large one go once the partition has waited
	// spareIdle for work (see idleSpare).
	spare      *pending
	spareTimer *time.Timer
	// items holds the records of the units send is sending, and recs and
	// payloads those of one compressed idempotent request in kafka-go's
	// form while it is encoded. Each is refilled by the next call and kept by nothing
	// past the call that filled it: a pending batch has its own copy of its
	// records. A non-idempotent request gets its own recs and payloads,
	// since kafka-go reads them until it is answered.
	items    []item
	recs     []kafkago.Record
	payloads []payload
}

// item is a record on its way out and the index of its unit in the batch.
type item struct {
	r record
	u int
}

func (p *partition) submit(u *unit) {
	p.mu.Lock()
	p.arrive(u)
	p.queue = append(p.queue, u)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run sends the queued units, one request at a time, until the sink closes.
func (p *partition) run(ctx context.Context) {
	defer p.s.wg.Done()
	for {
		batch := p.next(ctx)
		if batch == nil {
			p.drain(ctx.Err())
			if p.pending != nil && p.pending.doubt {
				// Its events were not acknowledged: the next process
				// writes them again, under another producer id.
				p.s.possibleDuplicates(dupClosed, len(p.pending.records))
			}
			// Acknowledged after their Write stopped waiting, and never
			// asked for again: the next process writes them again.
			p.s.possibleDuplicates(dupClosed, len(p.resolved))
			return
		}
		p.send(batch)
	}
}

// maxIdleSpare is the largest spare batch buffer a partition keeps while
// it waits for work. Reuse pays while a partition is busy; an idle one
// holding a batch of up to batch.maxBytes would cost that much memory per
// partition for nothing.
const maxIdleSpare = 64 << 10

// spareIdle is how long a partition waits for work before it lets a spare
// buffer over maxIdleSpare go. Not at once: a busy partition waits briefly
// between batches, and dropping its buffer each time made every large
// batch a fresh, zeroed allocation (a third of the bytes allocated per
// event into real Kafka). A variable for the tests.
var spareIdle = time.Second

// testHookWaiting is called as a partition starts to wait for work, and
// testHookSpareDropped when a waiting partition lets its spare go.
var testHookWaiting, testHookSpareDropped = func() {}, func() {}

// idleSpare returns a channel that fires once the partition has waited
// spareIdle, if it holds a spare buffer over maxIdleSpare; nil otherwise.
// Call it as the partition starts to wait.
func (p *partition) idleSpare() <-chan time.Time {
	if p.spare == nil || cap(p.spare.raw) <= maxIdleSpare {
		return nil
	}
	if p.spareTimer == nil {
		p.spareTimer = time.NewTimer(spareIdle)
	} else {
		// Since Go 1.23 Reset also discards a fire nobody received.
		p.spareTimer.Reset(spareIdle)
	}
	return p.spareTimer.C
}

// next waits for units and takes as many as fit in one request, waiting up
// to linger for more once it has the first if they come densely (see
// dense). It returns nil when ctx ends.
func (p *partition) next(ctx context.Context) []*unit {
	b := p.s.cfg.Batch
	var out []*unit
	var n, size int
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for {
		full := false
		p.mu.Lock()
		for len(p.queue) > 0 {
			u := p.queue[0]
			if len(out) > 0 && (n+len(u.records) > b.MaxMessages || size+u.bytes > b.MaxBytes) {
				full = true
				break
			}
			p.queue[0] = nil
			p.queue = p.queue[1:]
			if !u.state.CompareAndSwap(unitQueued, unitTaken) {
				continue // withdrawn by its Write
			}
			out = append(out, u)
			n += len(u.records)
			size += u.bytes
		}
		p.mu.Unlock()
		if len(out) > 0 && (full || !p.dense(out) || n >= b.MaxMessages || size >= b.MaxBytes) {
			return out
		}
		var expired, dropSpare <-chan time.Time
		if len(out) > 0 {
			if linger == nil {
				linger = time.NewTimer(b.Linger.Duration)
			}
			expired = linger.C
		} else {
			dropSpare = p.idleSpare()
			testHookWaiting()
		}
		select {
		case <-p.wake:
		case <-expired:
			return out
		case <-dropSpare:
			p.spare = nil
			testHookSpareDropped()
			continue
		case <-ctx.Done():
			for _, u := range out {
				u.done <- fmt.Errorf("kafka: sink closed: %w", ctx.Err())
			}
			return nil
		}
	}
}

// drain fails every unit still queued when the sink closes.
func (p *partition) drain(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, u := range q {
		if u.state.CompareAndSwap(unitQueued, unitTaken) {
			u.done <- fmt.Errorf("kafka: sink closed: %w", err)
		}
	}
}

// send produces the units' records, in order, in as few requests as the
// batch limits allow, one after the other; the first failure stops it. A
// request whose outcome is still unknown from an earlier round goes first,
// unchanged, and records it got acknowledged are not sent again (see
// partition.sendPending). A request never holds two events of one object: if a
// request whose answer is lost was appended after all and cannot be resent
// unchanged, the Write's retry then repeats at most one event of each
// object. A unit whose records all went out succeeds even if a later
// request failed, and each unit says how much of it went out: Write
// acknowledges the events of that prefix and fails the rest. A delete
// whose event is in that prefix and whose tombstone is not fails, and
// Write remembers that its event is in the log (placed.go).
func (p *partition) send(batch []*unit) {
	b := p.s.cfg.Batch
	var err error
	if p.pending != nil {
		err = p.resend()
	}
	p.skipResolved(batch)
	items := p.items[:0]
	for i, u := range batch {
		for _, r := range u.records[u.sent:] {
			items = append(items, item{r, i})
		}
	}
	all := items
	keys := p.objects
	for len(items) > 0 && err == nil {
		clear(keys)
		n, size := 0, 0
		for n < len(items) && n < b.MaxMessages && (n == 0 || size+items[n].r.size() <= b.MaxBytes) {
			if r := &items[n].r; r.kind == kindEvent {
				if _, dup := keys[r.object]; dup {
					break
				}
				keys[r.object] = struct{}{}
			}
			size += items[n].r.size()
			n++
		}
		if err = p.produce(items[:n]); err == nil {
			for _, it := range items[:n] {
				batch[it.u].sent++
			}
		}
		items = items[n:]
	}
	// Cleared, so that the kept array does not hold on to the events until
	// the next batch.
	clear(all)
	p.items = all[:0]
	for _, u := range batch {
		if !u.state.CompareAndSwap(unitTaken, unitAnswered) {
			// Its Write stopped waiting (see unit.wait) and failed all of
			// it: the retry must skip what the broker took.
			for _, r := range u.records[:u.sent] {
				p.resolved[recordKey{r.src, r.kind}] = struct{}{}
			}
		}
		if u.sent == len(u.records) {
			u.done <- nil
		} else {
			u.done <- tooLarge(err)
		}
	}
}

// produce sends one request and waits for its answer. Its context is not
// the Write's: a request on the wire is always seen through to the broker's
// answer or to the deadline, which closes the connection under it. The
// leader waits at most brokerAckTimeout for its followers, so normally the
// broker answers first.
func (p *partition) produce(items []item) error {
	s := p.s
	if s.idempotent {
		return p.produceIdempotent(items)
	}
	rs := make([]record, len(items))
	for i := range items {
		rs[i] = items[i].r
	}
	// Not the partition's recs and payloads: kafka-go encodes them in the
	// connection's goroutine, which may outlive a call that gave up
	// waiting.
	recs := make([]kafkago.Record, len(rs))
	setRecords(recs, make([]payload, 2*len(rs)), rs)
	err := p.roundTrip(rs, func(deadline time.Time) (*kafkago.ProduceResponse, error) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		return s.client.Produce(ctx, &kafkago.ProduceRequest{
			Topic:        p.topic,
			Partition:    p.id,
			RequiredAcks: s.acks,
			Records:      kafkago.NewRecordReader(recs...),
			Compression:  s.compression,
		})
	})
	if err != nil && classify(err) == inDoubt {
		// The retry sends the records again as new ones, and nothing
		// tells the broker that they may be in the log already.
		s.possibleDuplicates(dupNotIdempotent, len(rs))
	}
	return err
}

// setRecords fills recs, kafka-go's form of rs, with the keys and values
// read through bs, two a record: kafka-go's NewBytes would allocate one per
// key and per value.
func setRecords(recs []kafkago.Record, bs []payload, rs []record) {
	for i := range rs {
		r := &rs[i]
		recs[i] = kafkago.Record{Time: r.time, Key: bs[2*i].of(r.key), Headers: r.headerList()}
		recs[i].Value = bs[2*i+1].of(r.value)
	}
}

// roundTrip makes one produce request for rs, bounded by requestTimeout,
// and counts it. A duplicate-sequence answer is a success: the broker holds
// the batch from an earlier copy.
func (p *partition) roundTrip(rs []record, do func(deadline time.Time) (*kafkago.ProduceResponse, error)) error {
	s := p.s
	start := time.Now()
	p.busySince.Store(start.UnixNano())
	res, err := do(start.Add(s.cfg.RequestTimeout.Duration))
	p.busySince.Store(0)
	m := s.series()
	m.observeProduce(time.Since(start).Seconds())
	if err == nil && res != nil && res.Error != nil && !errors.Is(res.Error, kafkago.DuplicateSequenceNumber) {
		err = res.Error
	}
	s.observe(err)
	if err != nil {
		mProduceRequests.WithLabelValues(s.name, outcome(err)).Inc()
		return fmt.Errorf("kafka: produce %d records to %s[%d]: %w", len(rs), p.topic, p.id, err)
	}
	m.produceOK.Inc()
	m.batchRecords.Observe(float64(len(rs)))
	var events, tombstones, markers int
	for i := range rs {
		switch rs[i].kind {
		case kindEvent:
			events++
		case kindTombstone:
			tombstones++
		case kindMarker:
			markers++
		}
	}
	m.events.Add(float64(events))
	m.tombstones.Add(float64(tombstones))
	m.markers.Add(float64(markers))
	return nil
}

// payload is a record's key or value as kafka-go reads it (protocol.Bytes):
// read once, from the start, by the request's encoder.
type payload struct {
	b   []byte
	off int
}

// of points p at b and returns it, or nil, kafka-go's null bytes (a
// tombstone's value), for a nil b.
func (p *payload) of(b []byte) kafkago.Bytes {
	if b == nil {
		return nil
	}
	p.b, p.off = b, 0
	return p
}

func (p *payload) Len() int { return len(p.b) - p.off }

func (p *payload) Read(b []byte) (int, error) {
	if p.off == len(p.b) {
		return 0, io.EOF
	}
	n := copy(b, p.b[p.off:])
	p.off += n
	return n, nil
}

// WriteTo lets io.Copy, which the encoder uses, write the bytes in one go.
func (p *payload) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(p.b[p.off:])
	p.off += n
	return int64(n), err
}

func (p *payload) Close() error { return nil }
