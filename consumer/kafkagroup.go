package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Rebalance is what one generation of a consumer group changed for a
// member with KafkaConfig.States.
type Rebalance struct {
	// Generation is the group's generation id.
	Generation int32
	// Assigned holds the partitions the member reads in this generation,
	// each with the offset it starts at.
	Assigned Positions
	// Revoked names the partitions it read before and gave up.
	Revoked []string
}

// runShared is runGroup for a member whose partitions' states live in
// KafkaConfig.States. It follows the group's generations itself (kafka-go's
// ConsumerGroup, not a Reader's), because it must act on each assignment:
// take over a partition's state before reading it, and save it back before
// the partition goes. kafka-go's group rejoins only after every reader of
// the generation returned, so a member that leaves a partition in a
// rebalance has saved and committed it before the next member gets it.
func (s *KafkaSource) runShared(ctx context.Context) error {
	g, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID: s.cfg.GroupID, Brokers: s.cfg.Brokers, Dialer: s.cfg.Dialer, Topics: []string{s.cfg.Topic},
		StartOffset: kafkago.FirstOffset, SessionTimeout: s.cfg.SessionTimeout,
		HeartbeatInterval:     min(s.cfg.SessionTimeout/3, 3*time.Second),
		WatchPartitionChanges: true,
	})
	if err != nil {
		return fmt.Errorf("consumer: group %s: %w", s.cfg.GroupID, err)
	}
	defer g.Close()
	// kept holds the partitions of this membership's last generation: the
	// View is where reading them stopped.
	kept := map[int]bool{}
	defer func() {
		if ctx.Err() != nil {
			return // Run ends: the View stays as it stands
		}
		// Out of the group until the next attempt joins again: the
		// partitions are another member's meanwhile, and each was saved
		// when its reader returned. The next membership takes them over
		// from their saved states.
		for _, name := range s.v.partitionsHeld() {
			if _, ok := s.partitionOf(name); ok {
				s.v.release(name)
			}
		}
	}()
	for {
		gen, err := g.Next(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, kafkago.ErrGroupClosed) {
			// A join or sync that failed (the coordinator moved, a
			// rebalance in progress): kafka-go's group tries again by
			// itself, with the same member when it can.
			s.report(fmt.Errorf("consumer: group %s: %w", s.cfg.GroupID, err), 0)
			continue
		}
		if err != nil {
			return s.stopped(ctx, err)
		}
		committed := map[int]int64{}
		for _, a := range gen.Assignments[s.cfg.Topic] {
			committed[a.ID] = a.Offset
		}
		rb := Rebalance{Generation: gen.ID, Assigned: Positions{}}
		for _, name := range s.v.partitionsHeld() {
			if p, ok := s.partitionOf(name); ok {
				if _, assigned := committed[p]; !assigned {
					s.v.release(name)
					rb.Revoked = append(rb.Revoked, name)
				}
			}
		}
		starts, ends := map[int]int64{}, map[int]int64{}
		for p, c := range committed {
			start, end, replaced, err := s.takeOver(ctx, p, c, kept[p])
			if err != nil {
				return err
			}
			if replaced {
				// The View's objects of p gave way to a newer saved
				// state: what they were is gone as a revoked
				// partition's is.
				rb.Revoked = append(rb.Revoked, KafkaPartition(s.cfg.Topic, p))
			}
			starts[p], ends[p] = start, end
			rb.Assigned[KafkaPartition(s.cfg.Topic, p)] = start
		}
		kept = map[int]bool{}
		for p := range committed {
			kept[p] = true
		}
		sort.Strings(rb.Revoked)
		if s.cfg.OnRebalance != nil {
			s.cfg.OnRebalance(rb)
		}
		track := newCatchUp(starts, ends, s.synced)
		errs := make(chan error, len(starts))
		var wg sync.WaitGroup
		for p, start := range starts {
			wg.Add(1)
			gen.Start(func(gctx context.Context) {
				defer wg.Done()
				if err := s.readShared(ctx, gctx, gen, p, start, track); err != nil {
					errs <- err
				}
			})
		}
		// The generation ends when a rebalance begins, when ctx ends,
		// or when one reader fails: every reader then returns.
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// takeOver readies partition p for reading in a new generation, whose
// committed offset for it is committed (kafkago.FirstOffset if none), and
// returns where reading starts and the partition's end offset now. A
// partition the member keeps from the last generation goes on from the
// View's position; a new one from the state it takes over, which is at
// least as new as the group's offset (a member saves before it commits).
func (s *KafkaSource) takeOver(ctx context.Context, p int, committed int64, kept bool) (start, end int64, replaced bool, err error) {
	name := KafkaPartition(s.cfg.Topic, p)
	first, end, err := s.offsets(ctx, p)
	if err != nil {
		return 0, 0, false, err
	}
	if !kept {
		// The saved state, unless the View is as far: it read the
		// partition before (a previous membership, a state file it was
		// loaded from) and no member read on since.
		state, err := s.cfg.States.Load(ctx, name)
		if err != nil {
			return 0, 0, false, fmt.Errorf("consumer: take over %s: %w", name, err)
		}
		var saved int64
		if state != nil {
			if saved, err = statePosition(state, name); err != nil {
				return 0, 0, false, fmt.Errorf("consumer: take over %s: %w", name, err)
			}
		}
		switch o, held := s.v.positionOf(name); {
		case state == nil:
		case saved > end:
			// Past the partition's end: a state of a topic deleted and
			// created again. Its objects are not this topic's.
			s.report(fmt.Errorf("consumer: the saved state of %s stands at %d, past the partition's end %d: the topic was created again? Not taken over; remove the partition's saved states", name, saved, end), 0)
		case !held || saved > o:
			if committed >= 0 && saved < committed {
				s.report(fmt.Errorf("consumer: the saved state of %s stands at %d, behind the group's offset %d (a member saves before it commits: another store, or a listing not yet up to date?); taking it over, handlers see the records in between again", name, saved, committed), 0)
			}
			if held {
				s.v.release(name)
				replaced = true
			}
			if err := s.v.adopt(name, state); err != nil {
				return 0, 0, replaced, fmt.Errorf("consumer: take over %s: %w", name, err)
			}
		}
	}
	start = committed
	if o, ok := s.v.positionOf(name); ok {
		// The state's position; ahead of the group's offset by what the
		// last member applied and saved but did not commit.
		start = o
	} else if committed > first {
		s.report(fmt.Errorf("consumer: group %s has committed %s up to %d, and no state of it was saved: reading on from there, the View lacks the partition's objects until its next complete snapshot", s.cfg.GroupID, name, committed), 0)
	}
	if start < first || start > end {
		if start != kafkago.FirstOffset {
			// Retention deleted what was stored, or the topic was
			// created again.
			s.v.Gap(name, first)
		}
		start = first
	}
	s.v.startAt(name, start)
	return start, end, replaced, nil
}

// partitionOf returns the partition number of a View partition of this
// source's topic.
func (s *KafkaSource) partitionOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, s.cfg.Topic+"/")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(rest)
	return p, err == nil
}

// readShared reads one partition for one generation, saving its state and
// committing in batches as runGroup does, and once more when the generation
// or ctx ends. It returns nil when the generation ends.
func (s *KafkaSource) readShared(ctx, gctx context.Context, gen *kafkago.Generation, p int, start int64, track *catchUp) error {
	name := KafkaPartition(s.cfg.Topic, p)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	context.AfterFunc(gctx, stop)
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: s.cfg.Brokers, Topic: s.cfg.Topic, Partition: p, Dialer: s.cfg.Dialer,
		IsolationLevel: kafkago.ReadCommitted, MaxWait: s.cfg.MaxWait, OffsetOutOfRangeError: true,
	})
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		return fmt.Errorf("consumer: read %s from %d: %w", name, start, err)
	}
	var (
		n       int       // records applied since the last commit
		since   time.Time // when the oldest of them was applied
		failing time.Time // when the first of the failing commits in a row failed
	)
	commit := func(cctx context.Context) error {
		if n == 0 {
			return nil
		}
		state, pos, err := s.v.partitionState(name)
		if err != nil {
			return err
		}
		if err := s.cfg.States.Save(cctx, name, pos, state); err != nil {
			return fmt.Errorf("before the commit: %w", err)
		}
		if err := gen.CommitOffsets(map[string]map[int]int64{s.cfg.Topic: {p: pos}}); err != nil {
			return err
		}
		n, failing = 0, time.Time{}
		return nil
	}
	defer func() {
		// Leaving the partition: save and commit what the View applied,
		// so that the member that reads it next starts there. The
		// generation may have ended: a rebalance accepts the commits of
		// the generation it ends until every member has joined again.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout/2)
		defer cancel()
		if err := commit(fctx); err != nil && ctx.Err() == nil {
			s.report(fmt.Errorf("consumer: commit of group %s on leaving %s: %w", s.cfg.GroupID, name, err), 0)
		}
	}()
	for {
		fctx, cancel := rctx, context.CancelFunc(func() {})
		if n > 0 {
			fctx, cancel = context.WithDeadline(rctx, since.Add(s.cfg.CommitInterval))
		}
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil && rctx.Err() == nil && fctx.Err() != nil {
			if err := s.sharedCommit(ctx, commit, &failing); err != nil {
				return err
			}
			since = time.Now()
			continue
		}
		if errors.Is(err, kafkago.OffsetOutOfRange) {
			first, _, oerr := s.offsets(rctx, p)
			if oerr != nil {
				return s.stopped(rctx, oerr)
			}
			s.v.Gap(name, first)
			track.resume(p, first)
			if err := r.SetOffset(first); err != nil {
				return fmt.Errorf("consumer: read %s from %d: %w", name, first, err)
			}
			continue
		}
		if err != nil {
			if rctx.Err() != nil {
				return nil // the generation or Run ended
			}
			return s.stopped(ctx, err)
		}
		if next, ok := s.v.positionOf(name); ok && m.Offset < next {
			track.read(p, m.Offset)
			continue // the state already holds it
		}
		s.handle(m)
		// Caught up only once the View applied it: WaitForSync must
		// not return before the last record's change.
		track.read(p, m.Offset)
		if n == 0 {
			since = time.Now()
		}
		n++
		if n >= commitBatch || time.Since(since) >= s.cfg.CommitInterval {
			if err := s.sharedCommit(ctx, commit, &failing); err != nil {
				return err
			}
			since = time.Now()
		}
	}
}

// sharedCommit is commitOrGiveUp for readShared.
func (s *KafkaSource) sharedCommit(ctx context.Context, commit func(context.Context) error, failing *time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	err := commit(cctx)
	if err == nil || ctx.Err() != nil {
		return s.stoppedIf(ctx, err)
	}
	err = fmt.Errorf("consumer: commit of group %s: %w", s.cfg.GroupID, err)
	if failing.IsZero() {
		*failing = time.Now()
	}
	if !commitRetriable(err) || time.Since(*failing) >= commitStuck {
		return err
	}
	s.report(err, s.cfg.CommitInterval)
	return nil
}
