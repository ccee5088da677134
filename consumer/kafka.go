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
	// commits the records the View applied in batches: every 500 records,
	// CommitInterval after the oldest uncommitted one was applied, and
	// when Run stops.
	GroupID string
	// CommitInterval bounds how long a record applied by a group member
	// waits for its commit, and so what a killed member's partitions
	// read again. Default DefaultCommitInterval.
	CommitInterval time.Duration
	// BeforeCommit, if set, is called before each commit of the group,
	// after the View applied every record the commit covers. A group
	// member that keeps its View's state (View.SaveStateFile) saves it
	// here, so that the group's offsets never run ahead of the saved
	// state: a member that restarts from that state misses nothing. If it
	// fails, nothing is committed and the failure is handled as a failed
	// commit.
	BeforeCommit func(context.Context) error
	// States, if set with GroupID, keeps each partition's View state
	// where every member of the group finds it, and makes the group a
	// group of Views that each hold the keys of their partitions: when
	// the group assigns a partition to this member, the View takes over
	// the partition's state (its objects come to handlers as adds with
	// isInInitialList true) and reads on from the state's position; when
	// a rebalance takes the partition away, the member saves its state,
	// commits, and the View forgets the partition's objects (handlers
	// are not called; OnRebalance says which partitions went). Before
	// each commit, the state of each partition committed is saved. A
	// member killed at any moment therefore hands over a state at least
	// as new as the group's offsets: the member that reads its
	// partitions next misses no delete and handles nothing again that
	// was committed. With States, BeforeCommit is not called.
	States PartitionStates
	// OnRebalance, if set, is called at each new generation of a group
	// that has States, before reading starts, with the partitions this
	// member reads now and where each starts, and those it gave up.
	OnRebalance func(Rebalance)
	// SessionTimeout is how long the group waits for a member that stopped
	// heartbeating (killed, partitioned away) before its partitions go to
	// the others, and so how long they pause; heartbeats go every third of
	// it, at most every 3s. Default 30s; brokers refuse one below their
	// group.min.session.timeout.ms (6s by default).
	SessionTimeout time.Duration
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
	// Run's goroutine (a group with States: also from its partitions'
	// goroutines, never two calls at once) and must not block. Without it
	// the failure is logged with slog.Default at level WARN. To stop at
	// the first failure, cancel Run's context from it.
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
	// reportMu serialises calls of OnError.
	reportMu sync.Mutex
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
	if cfg.States != nil && cfg.GroupID == "" {
		return nil, errors.New("consumer: a Kafka source keeps partition states (States) only in a consumer group (GroupID)")
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
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = DefaultCommitInterval
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
	return newRetrier("topic "+s.cfg.Topic, s.cfg.OnError, s.cfg.MaxBackoff).run(ctx, &s.read, s.attempt)
}

// attempt reads until ctx ends or reading fails. Until an attempt got as far
// as the partitions' offsets, it starts where the config says; later ones
// where the View is, so that nothing applied is read again and nothing
// written meanwhile is skipped (FromEnd included).
func (s *KafkaSource) attempt(ctx context.Context) error {
	if s.cfg.States != nil {
		return s.runShared(ctx)
	}
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

// A group member commits the offsets of the records its View applied a
// batch at a time: a commit is a round trip to the group coordinator, which
// writes it to an offsets topic replicated with acks=all, and one per record
// capped a member at about 100 records/s on a 3-node cluster.
const (
	// commitBatch is the most records a member applies before it commits.
	commitBatch = 500
	// DefaultCommitInterval is the longest an applied record of a group
	// waits for its commit, unless KafkaConfig.CommitInterval sets it.
	DefaultCommitInterval = 500 * time.Millisecond
	// commitTimeout bounds one commit: between two generations of the
	// group no commit is answered, and reading must not wait for one.
	commitTimeout = 10 * time.Second
	// commitStuck is how long commits may fail in a row before the
	// member gives up its place in the group and Run joins it again.
	commitStuck = 30 * time.Second
)

// groupCommits holds, per partition, the newest record the View applied
// and the group has not committed.
type groupCommits struct {
	pending map[int]kafkago.Message
	n       int       // records applied since the last commit
	since   time.Time // when the oldest of them was applied
	failing time.Time // when the first of the failing commits in a row failed
}

func (c *groupCommits) add(m kafkago.Message) {
	if c.n == 0 {
		c.since = time.Now()
	}
	if p, ok := c.pending[m.Partition]; !ok || m.Offset > p.Offset {
		c.pending[m.Partition] = m
	}
	c.n++
}

func (s *KafkaSource) runGroup(ctx context.Context, track *catchUp) error {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: s.cfg.Brokers, GroupID: s.cfg.GroupID, Topic: s.cfg.Topic, Dialer: s.cfg.Dialer,
		IsolationLevel: kafkago.ReadCommitted, StartOffset: kafkago.FirstOffset, MaxWait: s.cfg.MaxWait,
		SessionTimeout: s.cfg.SessionTimeout, HeartbeatInterval: min(s.cfg.SessionTimeout/3, 3*time.Second),
		OffsetOutOfRangeError: true,
		// CommitInterval 0: CommitMessages is synchronous, so that a
		// failed commit comes back here and is reported. The batching
		// is this loop's (commitBatch, KafkaConfig.CommitInterval),
		// not kafka-go's periodic commits, whose failures it only logs.
	})
	c := &groupCommits{pending: map[int]kafkago.Message{}}
	defer func() {
		// Leaving the group: commit what the View applied, so that the
		// member that reads these partitions next does not apply it
		// again. With a context of its own, as ctx may have ended.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout/2)
		defer cancel()
		if err := s.commit(fctx, r, c); err != nil && ctx.Err() == nil {
			s.report(fmt.Errorf("consumer: commit of group %s on leaving: %w", s.cfg.GroupID, err), 0)
		}
		r.Close()
	}()
	for {
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if c.n > 0 {
			// Wait for more only until the oldest applied record is
			// due for its commit.
			fctx, cancel = context.WithDeadline(ctx, c.since.Add(s.cfg.CommitInterval))
		}
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil && ctx.Err() == nil && fctx.Err() != nil {
			if err := s.commitOrGiveUp(ctx, r, c); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return s.stopped(ctx, err)
		}
		if next, ok := s.v.positionOf(KafkaPartition(s.cfg.Topic, m.Partition)); ok && m.Offset < next {
			track.read(m.Partition, m.Offset)
			// Applied already: each generation of the group starts the
			// partitions it assigns at their committed offsets, which
			// trail what this member applied by the uncommitted tail,
			// also for a partition it keeps (or gets back), and a View
			// loaded from a saved state holds what the group committed
			// and more. Handlers must not see a record twice from one
			// member.
			c.add(m)
			continue
		}
		s.handle(m)
		// Caught up only once the View applied it.
		track.read(m.Partition, m.Offset)
		c.add(m)
		if c.n >= commitBatch || time.Since(c.since) >= s.cfg.CommitInterval {
			if err := s.commitOrGiveUp(ctx, r, c); err != nil {
				return err
			}
		}
	}
}

// commit commits the offsets past the newest record the View applied of
// each partition, and only those: at least once, a record is committed only
// after every handler returned for it.
func (s *KafkaSource) commit(ctx context.Context, r *kafkago.Reader, c *groupCommits) error {
	if c.n == 0 {
		return nil
	}
	msgs := make([]kafkago.Message, 0, len(c.pending))
	for _, m := range c.pending {
		msgs = append(msgs, m)
	}
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	if s.cfg.BeforeCommit != nil {
		if err := s.cfg.BeforeCommit(cctx); err != nil {
			return fmt.Errorf("before the commit: %w", err)
		}
	}
	if err := r.CommitMessages(cctx, msgs...); err != nil {
		return err
	}
	clear(c.pending)
	c.n, c.failing = 0, time.Time{}
	return nil
}

// commitOrGiveUp commits, and rides out a failed commit the group recovers
// from by itself: the coordinator moved (Not Coordinator For Group) or is
// loading, a rebalance ended the generation, the connection broke. kafka-go
// finds the new coordinator and joins the next generation with the same
// member, and the offsets, still pending, go with the next commit. Joining
// again as a new member would hand this member's partitions to another one
// and back. A failure that will not pass (authorization, say), or commits
// failing for commitStuck, end the attempt.
func (s *KafkaSource) commitOrGiveUp(ctx context.Context, r *kafkago.Reader, c *groupCommits) error {
	err := s.commit(ctx, r, c)
	if err == nil || ctx.Err() != nil {
		return s.stoppedIf(ctx, err)
	}
	err = fmt.Errorf("consumer: commit of group %s: %w", s.cfg.GroupID, err)
	if c.failing.IsZero() {
		c.failing = time.Now()
	}
	if !commitRetriable(err) || time.Since(c.failing) >= commitStuck {
		return err
	}
	// The next try is one interval away, not at the next record.
	c.since = time.Now()
	s.report(err, s.cfg.CommitInterval)
	return nil
}

// commitRetriable tells a commit failure the group recovers from by itself.
func commitRetriable(err error) bool {
	var kerr kafkago.Error
	if !errors.As(err, &kerr) {
		return true // the connection, or the commit's timeout
	}
	switch kerr {
	case kafkago.IllegalGeneration, kafkago.UnknownMemberId, kafkago.RebalanceInProgress:
		return true
	}
	return kerr.Temporary()
}

// report passes a failure Run rides out without a new attempt to OnError,
// or logs it.
func (s *KafkaSource) report(err error, retryIn time.Duration) {
	// A group with States reads each partition on a goroutine of its
	// own: OnError is never called concurrently.
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	newRetrier("topic "+s.cfg.Topic, s.cfg.OnError, s.cfg.MaxBackoff).report(err, retryIn)
}

// stoppedIf is stopped for a non-nil err.
func (s *KafkaSource) stoppedIf(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return s.stopped(ctx, err)
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
