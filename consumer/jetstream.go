package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// JetStreamConfig says which stream a JetStreamSource reads and how.
type JetStreamConfig struct {
	// JetStream is the client to read with, from jetstream.New on a
	// connection the caller made (servers, TLS and credentials are the
	// caller's). Required.
	JetStream jetstream.JetStream
	// Stream is the stream kubewire's NATS sink writes to. Required.
	Stream string
	// Durable, if set, reads through the durable pull consumer of that
	// name (created if missing, with explicit acks): it goes on where its
	// acks stopped, and each message is acked after the View applied it.
	// Otherwise an ordered consumer reads the stream, acking nothing.
	Durable string
	// BeforeAck, if set, makes a durable consumer ack in batches, and is
	// called before each batch, after the View applied every message the
	// batch acks: every 500 messages, AckInterval after the oldest unacked
	// one was applied, and when an attempt ends. A consumer that keeps its
	// View's state (View.SaveStateFile) saves it here, so that the
	// durable's acks never run ahead of the saved state: restarted from
	// that state, it misses nothing and skips what the state holds. If it
	// fails, nothing is acked and the attempt ends (Run reads on after a
	// backoff; the server redelivers the unacked messages after the
	// consumer's AckWait).
	BeforeAck func(context.Context) error
	// AckInterval bounds how long an applied message waits for its ack
	// with BeforeAck. Default DefaultCommitInterval.
	AckInterval time.Duration
	// Start, for an ordered consumer, starts at a stored position as
	// View.Position returns it (keyed by the stream's name); nil reads the
	// stream from its first message.
	Start Positions
	// FromEnd, for an ordered consumer without Start, reads only the
	// messages stored after Run began, as `kubewire tail` does by default,
	// across server restarts too. It reads the stream's info once
	// ($JS.API.STREAM.INFO.<stream>) to find where that is.
	FromEnd bool
	// OnError, if set, is called each time reading fails (the server is
	// unreachable, the stream or consumer is missing, an ack failed, ...),
	// with the error and how long Run waits before it reads on; and when
	// the connection is lost, with nats.ErrDisconnected and 0, as the NATS
	// client reconnects by itself. It is called from Run's goroutines and
	// must not block. Without it the failure is logged with slog.Default at
	// level WARN. To stop at the first failure, cancel Run's context from
	// it.
	OnError func(err error, retryIn time.Duration)
	// MaxBackoff bounds the wait between two attempts, which doubles from
	// 250ms with each failure in a row. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
}

// JetStreamSource reads a JetStream stream written by kubewire's NATS sink,
// in binary or structured mode, into a View. The stream is one partition of
// the View's rule, and its sequence is the position.
//
// At least once: with a durable consumer, a message is acked only after the
// View applied it and every handler returned, so a restart (or an ack that
// was lost) delivers it again; handlers must be ready to see an event twice.
//
// A stream sequence that jumps (messages removed by the stream's limits
// before they were read) is recorded as a gap (View.Gap).
//
// A server that goes away does not end Run: it reports it to OnError and
// reads on when the server is back (the NATS client reconnects by itself;
// when reading fails, Run waits with backoff and creates its consumer
// again, an ordered one from where the View is).
type JetStreamSource struct {
	v      *View
	cfg    JetStreamConfig
	synced func()
	// read counts the messages handled, to tell an attempt that read
	// something (the backoff starts over) from one that did not.
	read atomic.Int64
	// begun is set once an attempt recorded its start in the View: the
	// next attempts start from the View's position.
	begun bool
}

// NewJetStreamSource binds a source to v; v is not synced until Run read
// what the consumer had pending when Run started.
func NewJetStreamSource(v *View, cfg JetStreamConfig) (*JetStreamSource, error) {
	if cfg.JetStream == nil || cfg.Stream == "" {
		return nil, errors.New("consumer: a JetStream source needs a JetStream client and a stream")
	}
	if cfg.Durable != "" && cfg.Start != nil {
		return nil, errors.New("consumer: a durable consumer starts where its acks stopped, not from a position")
	}
	if cfg.FromEnd && (cfg.Durable != "" || cfg.Start != nil) {
		return nil, errors.New("consumer: a JetStream source starts from the end, where a durable acked, or from a position, only one")
	}
	if cfg.BeforeAck != nil && cfg.Durable == "" {
		return nil, errors.New("consumer: BeforeAck is for a durable consumer; an ordered one acks nothing")
	}
	if cfg.AckInterval <= 0 {
		cfg.AckInterval = DefaultCommitInterval
	}
	return &JetStreamSource{v: v, cfg: cfg, synced: v.addSource()}, nil
}

// Run reads until ctx ends, and then returns ctx's error. A failure to read
// does not end it: the failure goes to JetStreamConfig.OnError and Run reads
// on after a backoff, with its durable consumer, or an ordered consumer from
// the View's position in the stream.
func (s *JetStreamSource) Run(ctx context.Context) error {
	r := newRetrier("stream "+s.cfg.Stream, s.cfg.OnError, s.cfg.MaxBackoff)
	if nc := s.cfg.JetStream.Conn(); nc != nil {
		// The client waits for the server to come back by itself and
		// reading just pauses: say so, or a lost server looks like a
		// quiet stream.
		st := nc.StatusChanged(natsgo.RECONNECTING)
		reported := make(chan struct{})
		go func() {
			defer close(reported)
			for range st {
				r.report(fmt.Errorf("consumer: read %s: %w", s.cfg.Stream, natsgo.ErrDisconnected), 0)
			}
		}()
		// No report after Run returned.
		defer func() { nc.RemoveStatusListener(st); <-reported }()
	}
	return r.run(ctx, &s.read, s.attempt)
}

// attempt reads until ctx ends or reading fails. Until an attempt got as far
// as its consumer, it starts where the config says; later ones where the
// View is (an ordered consumer) or where the durable acked.
func (s *JetStreamSource) attempt(ctx context.Context) error {
	start := s.cfg.Start[s.cfg.Stream]
	if s.begun {
		start, _ = s.v.positionOf(s.cfg.Stream)
	}
	cons, err := s.consumer(ctx, start, s.cfg.FromEnd && !s.begun)
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer: consumer on %s: %w", s.cfg.Stream, err)
	}
	switch {
	case s.cfg.Durable != "":
		s.v.startAt(s.cfg.Stream, int64(info.AckFloor.Stream)+1)
	case start > 0:
		s.v.startAt(s.cfg.Stream, start)
	}
	s.begun = true
	if info.NumPending == 0 && info.NumAckPending == 0 {
		s.synced()
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("consumer: read %s: %w", s.cfg.Stream, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	last := uint64(0)
	if start > 0 {
		last = uint64(start) - 1
	}
	acks := &durableAcks{s: s}
	defer func() {
		// An attempt that ends acks what the View applied, as a Kafka
		// group member commits when it leaves.
		if err := acks.flush(context.WithoutCancel(ctx)); err != nil && ctx.Err() == nil {
			s.report(err, 0)
		}
	}()
	for {
		m, err := acks.next(ctx, it)
		if errors.Is(err, errAckDue) {
			if err := acks.flush(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("consumer: read %s: %w", s.cfg.Stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("consumer: metadata of a message of %s: %w", s.cfg.Stream, err)
		}
		seq := meta.Sequence.Stream
		if next, ok := s.v.positionOf(s.cfg.Stream); s.cfg.Durable != "" && ok && int64(seq) < next {
			// Applied already, by this process before an ack was lost
			// or held back, or by the one whose saved state the View
			// was loaded from: its handlers must not see it again.
			if err := acks.add(ctx, m); err != nil {
				return err
			}
			continue
		}
		if meta.NumDelivered == 1 && last > 0 && seq > last+1 {
			s.v.Gap(s.cfg.Stream, int64(seq))
		}
		if seq > last {
			last = seq
		}
		pos := Position{Partition: s.cfg.Stream, Offset: int64(seq)}
		s.read.Add(1)
		if ev, err := kwnats.DecodeMessage(m.Headers(), m.Data()); err != nil {
			s.v.Skip(pos, err)
		} else {
			s.v.Apply(pos, ev)
		}
		if s.cfg.Durable != "" {
			if err := acks.add(ctx, m); err != nil {
				return err
			}
		}
		if meta.NumPending == 0 {
			s.synced()
		}
	}
}

// report passes a failure to OnError, or logs it.
func (s *JetStreamSource) report(err error, retryIn time.Duration) {
	newRetrier("stream "+s.cfg.Stream, s.cfg.OnError, s.cfg.MaxBackoff).report(err, retryIn)
}

// durable returns the durable consumer, created if missing, so that it
// delivers in stream order from its ack floor. Messages it delivered to an
// earlier client (a process killed, an attempt that failed) and that were
// never acked come again only after the consumer's AckWait, behind newer
// ones: the View would apply a delete before the add it follows, and take
// the late ones for applied. Such a consumer is created again from its ack
// floor. The source owns the durable: two processes must not share one.
func (s *JetStreamSource) durable(ctx context.Context) (jetstream.Consumer, error) {
	js, stream, name := s.cfg.JetStream, s.cfg.Stream, s.cfg.Durable
	cfg := jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy}
	c, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c, err = js.CreateConsumer(ctx, stream, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: durable %s on %s: %w", name, stream, err)
	}
	info := c.CachedInfo()
	if info.Delivered.Stream <= info.AckFloor.Stream {
		return c, nil
	}
	if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("consumer: durable %s on %s: deleting it to redeliver its unacked messages in order: %w", name, stream, err)
	}
	if floor := info.AckFloor.Stream; floor > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
	}
	if c, err = js.CreateConsumer(ctx, stream, cfg); err != nil {
		return nil, fmt.Errorf("consumer: durable %s on %s: creating it again from its ack floor: %w", name, stream, err)
	}
	return c, nil
}

// errAckDue says the oldest applied message is due for its ack.
var errAckDue = errors.New("ack due")

// durableAcks acks what the View applied: each message at once, or with
// BeforeAck, in batches after BeforeAck returned.
type durableAcks struct {
	s       *JetStreamSource
	pending []jetstream.Msg
	since   time.Time // when the oldest pending message was applied
}

// next waits for the next message, or until the pending batch is due.
func (a *durableAcks) next(ctx context.Context, it jetstream.MessagesContext) (jetstream.Msg, error) {
	if len(a.pending) == 0 {
		return it.Next()
	}
	dctx, cancel := context.WithDeadline(ctx, a.since.Add(a.s.cfg.AckInterval))
	defer cancel()
	m, err := it.Next(jetstream.NextContext(dctx))
	if err != nil && ctx.Err() == nil && dctx.Err() != nil {
		return nil, errAckDue
	}
	return m, err
}

func (a *durableAcks) add(ctx context.Context, m jetstream.Msg) error {
	if a.s.cfg.BeforeAck == nil {
		if err := m.Ack(); err != nil {
			return a.ackFailed(m, err)
		}
		return nil
	}
	if len(a.pending) == 0 {
		a.since = time.Now()
	}
	a.pending = append(a.pending, m)
	if len(a.pending) >= commitBatch || time.Since(a.since) >= a.s.cfg.AckInterval {
		return a.flush(ctx)
	}
	return nil
}

func (a *durableAcks) flush(ctx context.Context) error {
	if len(a.pending) == 0 {
		return nil
	}
	if err := a.s.cfg.BeforeAck(ctx); err != nil {
		return fmt.Errorf("consumer: before acking %d messages of %s: %w", len(a.pending), a.s.cfg.Stream, err)
	}
	for i, m := range a.pending {
		if err := m.Ack(); err != nil {
			a.pending = a.pending[i:]
			return a.ackFailed(m, err)
		}
	}
	a.pending = a.pending[:0]
	return nil
}

func (a *durableAcks) ackFailed(m jetstream.Msg, err error) error {
	seq := uint64(0)
	if meta, merr := m.Metadata(); merr == nil {
		seq = meta.Sequence.Stream
	}
	return fmt.Errorf("consumer: ack %s seq %d: %w", a.s.cfg.Stream, seq, err)
}

func (s *JetStreamSource) consumer(ctx context.Context, start int64, fromEnd bool) (jetstream.Consumer, error) {
	if s.cfg.Durable != "" {
		return s.durable(ctx)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if fromEnd {
		// Not DeliverNew: the client recreates an ordered consumer after
		// the server restarts, and one that had read nothing yet would
		// then start at the end as of that moment, skipping whatever was
		// written between the restart and the re-creation. Pin the end
		// as of now instead.
		st, err := s.cfg.JetStream.Stream(ctx, s.cfg.Stream)
		if err != nil {
			return nil, fmt.Errorf("consumer: stream %s: %w", s.cfg.Stream, err)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, st.CachedInfo().State.LastSeq+1
	}
	if start > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, uint64(start)
	}
	c, err := s.cfg.JetStream.OrderedConsumer(ctx, s.cfg.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer: ordered consumer on %s: %w", s.cfg.Stream, err)
	}
	return c, nil
}
