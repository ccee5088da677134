package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/sinks/kafka"
)

// KafkaConfig says which topic a KafkaSource reads and from where.
type KafkaConfig struct {
	// Brokers are the bootstrap brokers, host:port. Required.
	Brokers []string
	// Topic is the topic kubewire's Kafka sink writes. Required.
	Topic string
	// GroupID, if set, reads as this consumer group: from its committed
	// offsets (from the first offset of partitions it has none for), and
	// commits each record after the View applied it.
	GroupID string
	// Start, if set and GroupID is not, starts each partition at a stored
	// position, as View.Position returns it (keyed by KafkaPartition).
	// Partitions it does not name, and every partition when Start is nil,
	// are read from their first offset.
	Start Positions
	// FromEnd, if set (and neither GroupID nor Start is), reads only the
	// records written after Run began, as `kubewire tail` does by default.
	FromEnd bool
	// Dialer sets TLS, SASL and timeouts; nil is kafka-go's default dialer.
	Dialer *kafkago.Dialer
	// MaxWait bounds how long one fetch waits for new records. Default 1s.
	MaxWait time.Duration
	// OnError, if set, is called each time reading fails (the brokers are
	// unreachable, the topic is missing, a commit failed, ...), with the
	// error and how long Run waits before it reads on. It is called from
	// Run's goroutine and must not block. Without it the failure is logged
	// with slog.Default at level WARN. To stop at the first failure,
	// cancel Run's context from it.
	OnError func(err error, retryIn time.Duration)
	// MaxBackoff bounds the wait between two attempts, which doubles from
	// 250ms with each failure in a row. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
}

// KafkaSource reads a topic written by kubewire's Kafka sink, in binary or
// structured mode, into a View, with isolation level read_committed. Each
// partition is a partition of the View's rule; tombstones delete.
//
// At least once: a record counts as read, for View.Position and for the
// consumer group's committed offset, only after the View applied it and
// every handler returned. A restart therefore reads some records again, and
// handlers must be ready to see an event twice (the View itself drops
// duplicates it has already applied).
//
// Without a group, a partition whose position is no longer in the topic
// (retention deleted it, or the topic was created again) is read on from its
// first offset and the View records a gap (View.Gap). With a group, the same
// condition is a failure reported to OnError until the group's offsets are
// reset.
//
// A broker that goes away does not end Run: it reports the failure to
// OnError, waits (with backoff) and reads on from where the View is (or,
// with a group, from the group's committed offsets).
type KafkaSource struct {
	v      *View
	cfg    KafkaConfig
	synced func()
	// read counts the records handled, to tell an attempt that read
	// something (the backoff starts over) from one that did not.
	read atomic.Int64
	// begun is set once an attempt recorded its start in the View: the
	// next attempts start from the View's position.
	begun bool
}

// NewKafkaSource binds a source to v; v is not synced until Run caught up
// with the topic as it stood when Run started.
func NewKafkaSource(v *View, cfg KafkaConfig) (*KafkaSource, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("consumer: a Kafka source needs brokers and a topic")
	}
	if cfg.GroupID != "" && cfg.Start != nil {
		return nil, errors.New("consumer: a Kafka source starts from a group's offsets or from a position, not both")
	}
	if cfg.FromEnd && (cfg.GroupID != "" || cfg.Start != nil) {
		return nil, errors.New("consumer: a Kafka source starts from the end, a group's offsets or a position, only one")
	}
	if cfg.Dialer == nil {
		cfg.Dialer = kafkago.DefaultDialer
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = time.Second
	}
	return &KafkaSource{v: v, cfg: cfg, synced: v.addSource()}, nil
}

// bounds is a partition's first and end offset when reading began.
type bounds struct{ first, end int64 }

// Run reads until ctx ends, and then returns ctx's error. A failure to read
// (the brokers went away, say) does not end it: the failure goes to
// KafkaConfig.OnError and Run reads on after a backoff, from the View's
// position in the topic (a group: from its committed offsets).
func (s *KafkaSource) Run(ctx context.Context) error {
	r := newRetrier("topic "+s.cfg.Topic, s.cfg.OnError, s.cfg.MaxBackoff)
	for {
		before := s.read.Load()
		err := s.attempt(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if werr := r.wait(ctx, err, s.read.Load() != before); werr != nil {
			return werr
		}
	}
}

// attempt reads until ctx ends or reading fails. Until an attempt got as far
// as the partitions' offsets, it starts where the config says; later ones
// where the View is, so that nothing applied is read again and nothing
// written meanwhile is skipped (FromEnd included).
func (s *KafkaSource) attempt(ctx context.Context) error {
	first := !s.begun
	parts, err := s.partitions(ctx)
	if err != nil {
		return err
	}
	ends := map[int]int64{}
	starts := map[int]int64{}
	for p, b := range parts {
		ends[p] = b.end
		starts[p] = b.first
		if s.cfg.FromEnd && first {
			starts[p] = b.end
		}
		name := KafkaPartition(s.cfg.Topic, p)
		o, ok := s.cfg.Start[name]
		if !first {
			o, ok = s.v.positionOf(name)
		}
		if ok {
			starts[p] = o
			if o < b.first || o > b.end {
				// Retention deleted what was stored, or the topic was
				// created again: read on from the first offset.
				s.v.Gap(name, b.first)
				starts[p] = b.first
			}
		}
	}
	if s.cfg.GroupID != "" {
		if err := s.committed(ctx, starts); err != nil {
			return err
		}
	}
	for p, o := range starts {
		s.v.startAt(KafkaPartition(s.cfg.Topic, p), o)
	}
	s.begun = true
	track := newCatchUp(starts, ends, s.synced)
	if s.cfg.GroupID != "" {
		return s.runGroup(ctx, track)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(parts))
	for p := range parts {
		wg.Go(func() {
			if err := s.runPartition(ctx, p, starts[p], track); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// partitions reads each partition's offsets.
func (s *KafkaSource) partitions(ctx context.Context) (map[int]bounds, error) {
	var ps []kafkago.Partition
	var err error
	for _, b := range s.cfg.Brokers {
		if ps, err = s.cfg.Dialer.LookupPartitions(ctx, "tcp", b, s.cfg.Topic); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: partitions of %s: %w", s.cfg.Topic, err)
	}
	out := map[int]bounds{}
	for _, p := range ps {
		first, end, err := s.offsets(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		out[p.ID] = bounds{first, end}
	}
	return out, nil
}

func (s *KafkaSource) offsets(ctx context.Context, partition int) (first, end int64, err error) {
	conn, err := s.cfg.Dialer.DialLeader(ctx, "tcp", s.cfg.Brokers[0], s.cfg.Topic, partition)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: leader of %s/%d: %w", s.cfg.Topic, partition, err)
	}
	defer conn.Close()
	if first, end, err = conn.ReadOffsets(); err != nil {
		return 0, 0, fmt.Errorf("consumer: offsets of %s/%d: %w", s.cfg.Topic, partition, err)
	}
	return first, end, nil
}

// committed replaces starts with the group's committed offsets, where it
// has them.
func (s *KafkaSource) committed(ctx context.Context, starts map[int]int64) error {
	ids := make([]int, 0, len(starts))
	for p := range starts {
		ids = append(ids, p)
	}
	c := &kafkago.Client{Addr: kafkago.TCP(s.cfg.Brokers...), Transport: &kafkago.Transport{
		TLS: s.cfg.Dialer.TLS, SASL: s.cfg.Dialer.SASLMechanism, ClientID: s.cfg.Dialer.ClientID,
	}}
	res, err := c.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: s.cfg.GroupID, Topics: map[string][]int{s.cfg.Topic: ids}})
	if err == nil {
		err = res.Error
	}
	if errors.Is(err, kafkago.GroupIdNotFound) {
		return nil // a new group: nothing committed yet
	}
	if err != nil {
		return fmt.Errorf("consumer: offsets of group %s: %w", s.cfg.GroupID, err)
	}
	for _, p := range res.Topics[s.cfg.Topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			starts[p.Partition] = p.CommittedOffset
		}
	}
	return nil
}

func (s *KafkaSource) runGroup(ctx context.Context, track *catchUp) error {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: s.cfg.Brokers, GroupID: s.cfg.GroupID, Topic: s.cfg.Topic, Dialer: s.cfg.Dialer,
		IsolationLevel: kafkago.ReadCommitted, StartOffset: kafkago.FirstOffset, MaxWait: s.cfg.MaxWait,
		OffsetOutOfRangeError: true,
		// CommitInterval 0: CommitMessages commits synchronously, after
		// the View applied the record.
	})
	defer r.Close()
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return s.stopped(ctx, err)
		}
		s.handle(m)
		if err := r.CommitMessages(ctx, m); err != nil {
			return s.stopped(ctx, err)
		}
		track.read(m.Partition, m.Offset)
	}
}

func (s *KafkaSource) runPartition(ctx context.Context, partition int, start int64, track *catchUp) error {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: s.cfg.Brokers, Topic: s.cfg.Topic, Partition: partition, Dialer: s.cfg.Dialer,
		IsolationLevel: kafkago.ReadCommitted, MaxWait: s.cfg.MaxWait, OffsetOutOfRangeError: true,
	})
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		return fmt.Errorf("consumer: read %s/%d from %d: %w", s.cfg.Topic, partition, start, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if errors.Is(err, kafkago.OffsetOutOfRange) {
			first, _, oerr := s.offsets(ctx, partition)
			if oerr != nil {
				return s.stopped(ctx, oerr)
			}
			s.v.Gap(KafkaPartition(s.cfg.Topic, partition), first)
			track.resume(partition, first)
			if err := r.SetOffset(first); err != nil {
				return fmt.Errorf("consumer: read %s/%d from %d: %w", s.cfg.Topic, partition, first, err)
			}
			continue
		}
		if err != nil {
			return s.stopped(ctx, err)
		}
		s.handle(m)
		track.read(m.Partition, m.Offset)
	}
}

// stopped returns nil-worthy ctx errors as ctx's error.
func (s *KafkaSource) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("consumer: read %s: %w", s.cfg.Topic, err)
}

// handle applies one record to the View.
func (s *KafkaSource) handle(m kafkago.Message) {
	s.read.Add(1)
	pos := Position{Partition: KafkaPartition(s.cfg.Topic, m.Partition), Offset: m.Offset}
	if m.Value == nil {
		s.v.Tombstone(pos, string(m.Key))
		return
	}
	ev, err := kafka.DecodeMessage(m)
	if err != nil {
		s.v.Skip(pos, err)
		return
	}
	s.v.Apply(pos, ev)
}

// catchUp tells when every partition was read up to the end offset it had
// when reading began.
type catchUp struct {
	mu     sync.Mutex
	behind map[int]int64 // partition → end offset still to reach
	done   func()
}

func newCatchUp(starts, ends map[int]int64, done func()) *catchUp {
	c := &catchUp{behind: map[int]int64{}, done: done}
	for p, end := range ends {
		if starts[p] < end {
			c.behind[p] = end
		}
	}
	c.check()
	return c
}

func (c *catchUp) read(partition int, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if end, ok := c.behind[partition]; ok && offset+1 >= end {
		delete(c.behind, partition)
		c.check()
	}
}

// resume notes that a partition goes on from offset after a gap.
func (c *catchUp) resume(partition int, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if end, ok := c.behind[partition]; ok && offset >= end {
		delete(c.behind, partition)
		c.check()
	}
}

func (c *catchUp) check() {
	if len(c.behind) == 0 {
		c.done()
	}
}
