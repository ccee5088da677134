package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"

	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// JetStreamHistoryConfig says which stream and resource HistoryAtJetStream
// reads, and the point it answers for.
type JetStreamHistoryConfig struct {
	// JetStream and Stream are as in JetStreamConfig. Required.
	JetStream jetstream.JetStream
	Stream    string
	// Subject filters the stream to the resource's subjects (see
	// kwnats.ResourceSubject); empty reads every subject of the stream.
	Subject string
	// Resource, RV, At, WatchPerNamespace and Now are as in
	// HistoryConfig.
	Resource          string
	RV                uint64
	At                time.Time
	WatchPerNamespace bool
	Now               func() time.Time
	// Lookback is as in HistoryConfig, measured in the times the server
	// stored the messages: JetStream finds a message by time only as the
	// first one it stored at or after it, so the scan starts before the
	// point and decides by resourceVersion. Default 15m.
	Lookback time.Duration
}

// HistoryAtJetStream is HistoryAt for a stream written by kubewire's NATS
// sink in JetStream mode: the stream is the one partition, its sequence
// the position. It does not look at the stream's limits: a stream that
// keeps a few messages per subject (MaxMsgsPerSubject) has lost versions
// as a compacted topic has, and the caller must refuse it.
func HistoryAtJetStream(ctx context.Context, cfg JetStreamHistoryConfig) (*History, error) {
	if cfg.JetStream == nil || cfg.Stream == "" || cfg.Resource == "" {
		return nil, errors.New("consumer: history needs a JetStream client, a stream and a resource")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = 15 * time.Minute
	}
	st, err := cfg.JetStream.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("consumer: stream %s: %w", cfg.Stream, err)
	}
	// The end is the stream's last message when reading began: a history
	// is of what the stream held then.
	last := st.CachedInfo().State.LastSeq
	r := &jsHistory{js: cfg.JetStream, stream: cfg.Stream, subject: cfg.Subject, last: last}
	first, err := r.firstAt(ctx, nil)
	if err != nil {
		return nil, err
	}
	q := historyQuery{resource: cfg.Resource, rv: cfg.RV, at: cfg.At, where: "stream " + cfg.Stream, perNamespace: cfg.WatchPerNamespace, read: r.read}
	from := cfg.At
	if cfg.RV != 0 || from.IsZero() {
		from = cfg.Now()
	}
	lookback := cfg.Lookback
	var read int64
	for {
		t := from.Add(-lookback)
		seq, err := r.firstAt(ctx, &t)
		if err != nil {
			return nil, err
		}
		h, n, err := historyFrom(ctx, q, Positions{cfg.Stream: int64(seq)})
		read += n
		if h != nil {
			h.Read = read
		}
		if !errors.Is(err, ErrNoSnapshot) && !errors.Is(err, ErrIncompleteSnapshot) || seq <= first {
			return h, err
		}
		lookback *= 4
	}
}

// jsHistory reads one stream, filtered to a resource's subjects, up to
// the sequence it ended at when reading began.
type jsHistory struct {
	js      jetstream.JetStream
	stream  string
	subject string
	last    uint64
}

// consumer is an ordered consumer of the subject from where cfg starts,
// or nil when nothing is pending there.
func (r *jsHistory) consumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	if r.subject != "" {
		cfg.FilterSubjects = []string{r.subject}
	}
	c, err := r.js.OrderedConsumer(ctx, r.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer: ordered consumer on %s: %w", r.stream, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("consumer: consumer on %s: %w", r.stream, err)
	}
	if info.NumPending == 0 {
		return nil, nil
	}
	return c, nil
}

// firstAt is the sequence of the first message of the subject stored at
// or after t (nil: the first one), or one past the end if there is none.
func (r *jsHistory) firstAt(ctx context.Context, t *time.Time) (uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if t != nil {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, t
	}
	c, err := r.consumer(ctx, cfg)
	if err != nil {
		return 0, err
	}
	if c == nil {
		return r.last + 1, nil
	}
	m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		return 0, fmt.Errorf("consumer: first message of %s after %v: %w", r.stream, t, err)
	}
	meta, err := m.Metadata()
	if err != nil {
		return 0, fmt.Errorf("consumer: metadata of a message of %s: %w", r.stream, err)
	}
	return meta.Sequence.Stream, nil
}

// read is historyQuery.read for the stream.
func (r *jsHistory) read(ctx context.Context, start Positions, onRead func(Read) bool) (int64, error) {
	seq := uint64(max(start[r.stream], 1))
	if seq > r.last {
		return 0, nil
	}
	c, err := r.consumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq})
	if err != nil || c == nil {
		return 0, err
	}
	it, err := c.Messages()
	if err != nil {
		return 0, fmt.Errorf("consumer: read %s: %w", r.stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var n int64
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, fmt.Errorf("consumer: reading stream %s: %w", r.stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, fmt.Errorf("consumer: metadata of a message of %s: %w", r.stream, err)
		}
		if meta.Sequence.Stream > r.last {
			return n, nil
		}
		n++
		rd := Read{Position: Position{Partition: r.stream, Offset: int64(meta.Sequence.Stream)}}
		if ev, err := kwnats.DecodeMessage(m.Headers(), m.Data()); err != nil {
			rd.Kind, rd.Err = ReadMalformed, err
		} else {
			rd.Kind, rd.Event, rd.Key = ReadEvent, ev, ext(ev, encoding.ExtPartitionKey)
		}
		if onRead(rd) || meta.NumPending == 0 || meta.Sequence.Stream == r.last {
			return n, nil
		}
	}
}
