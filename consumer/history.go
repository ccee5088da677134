package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// What a stream cannot answer about a point in its past. HistoryAt wraps
// them with what is missing; test with errors.Is.
var (
	// ErrNoSnapshot: no complete snapshot of the resource whose list is at
	// or before the point is left in the topic (retention dropped it, or
	// the point is older than the first snapshot).
	ErrNoSnapshot = errors.New("no complete snapshot before the point")
	// ErrIncompleteSnapshot: the only snapshots before the point are
	// marked incomplete: some of their records never reached the topic.
	ErrIncompleteSnapshot = errors.New("the snapshots before the point are incomplete")
	// ErrWatchGapInRange: kubewire declared a watch gap between the
	// snapshot and the point; changes in it may be missing.
	ErrWatchGapInRange = errors.New("a declared watch gap overlaps the range")
	// ErrReferencePayload: an event in the range carries a reference
	// instead of its object, so the object's content at the point is not
	// in the topic.
	ErrReferencePayload = errors.New("an event in the range carries a reference, not its object")
)

// HistoryConfig says which topic and resource HistoryAt reads, and the
// point it answers for.
type HistoryConfig struct {
	// Brokers, Topic and Dialer are as in KafkaConfig.
	Brokers []string
	Topic   string
	Dialer  *kafkago.Dialer
	// Resource is the resource's partition-key prefix ("configmaps",
	// "widgets.demo.kubewire.io"). Required.
	Resource string
	// RV is the point as a resourceVersion. If it is 0, At is the point.
	RV uint64
	// At is the point as a time: an event's time is when kubewire
	// observed the change, so At is turned into the highest
	// resourceVersion of the resource's events observed at or before it,
	// and the answer is decided by that version.
	At time.Time
	// Lookback is how far before the point (before now, for RV) the first
	// scan for a snapshot starts: the resource's snapshotInterval plus a
	// margin for a snapshot's duration and delivery lag. Kafka gives the
	// first offset of a time T only as the earliest offset whose timestamp
	// is T or later, and timestamps need not rise within a partition, so
	// the scan starts before the point and decides by resourceVersion.
	// While no snapshot is found, it starts again four times further
	// back, until the first offset. Default 15m.
	Lookback time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// History is the state of one resource at a point, read back from a topic.
type History struct {
	// View holds the resource's objects as they were at the point.
	View *View
	// RV is the point as a resourceVersion (HistoryConfig.At turned into
	// one).
	RV uint64
	// Snapshot and SnapshotRV name the snapshot the state was built from.
	Snapshot   string
	SnapshotRV uint64
	// Last is, per key the View holds, the event that set its object.
	Last map[string]*event.Event
	// Incomplete counts the snapshots at or before the point that were
	// passed over because they are marked incomplete.
	Incomplete int
}

// marker is what a scan learned of one snapshot.
type marker struct {
	id                  string
	startRV, completeRV uint64
	started             Positions // offset of the started marker, per partition
	completed           bool
	incomplete          bool
	completedAt         int64 // offset of the completed marker, to order snapshots
}

// HistoryAt builds the state of cfg.Resource at a point from a topic
// written by kubewire's Kafka sink: from the last complete snapshot whose
// completed marker's snapshotrv is at or below the point, and every event
// after it whose resourceversion is at or below the point (docs/events.md,
// "The version of a snapshot"). It reads what the topic holds when it
// starts, and says what the stream cannot answer with the errors above.
func HistoryAt(ctx context.Context, cfg HistoryConfig) (*History, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.Resource == "" {
		return nil, errors.New("consumer: history needs brokers, a topic and a resource")
	}
	if cfg.Dialer == nil {
		cfg.Dialer = kafkago.DefaultDialer
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = 15 * time.Minute
	}
	probe := &KafkaSource{cfg: KafkaConfig{Brokers: cfg.Brokers, Topic: cfg.Topic, Dialer: cfg.Dialer}}
	parts, err := probe.partitions(ctx)
	if err != nil {
		return nil, err
	}
	from := cfg.At
	if cfg.RV != 0 || from.IsZero() {
		from = cfg.Now()
	}
	lookback := cfg.Lookback
	for {
		start, all, err := historyStart(ctx, probe, parts, from.Add(-lookback))
		if err != nil {
			return nil, err
		}
		h, err := historyFrom(ctx, cfg, start)
		if !errors.Is(err, ErrNoSnapshot) && !errors.Is(err, ErrIncompleteSnapshot) || all {
			return h, err
		}
		lookback *= 4
	}
}

// historyStart is, per partition, the first offset whose timestamp is at
// or after t; all says every partition starts at its first offset.
func historyStart(ctx context.Context, s *KafkaSource, parts map[int]bounds, t time.Time) (Positions, bool, error) {
	start := Positions{}
	all := true
	for p, b := range parts {
		conn, err := s.cfg.Dialer.DialLeader(ctx, "tcp", s.cfg.Brokers[0], s.cfg.Topic, p)
		if err != nil {
			return nil, false, fmt.Errorf("consumer: leader of %s/%d: %w", s.cfg.Topic, p, err)
		}
		o, err := conn.ReadOffset(t)
		conn.Close()
		if err != nil {
			return nil, false, fmt.Errorf("consumer: offset of %s/%d at %s: %w", s.cfg.Topic, p, t.Format(time.RFC3339), err)
		}
		o = max(o, b.first)
		if o > b.first {
			all = false
		}
		start[KafkaPartition(s.cfg.Topic, p)] = o
	}
	return start, all, nil
}

// historyFrom scans the topic from start for the resource's snapshots and
// gaps, picks the snapshot, and applies the window from it.
func historyFrom(ctx context.Context, cfg HistoryConfig, start Positions) (*History, error) {
	point := cfg.RV
	snaps := map[string]*marker{}
	var order []*marker
	type gap struct {
		id string
		encoding.Gap
		after map[string]int64 // offset per partition
	}
	var gaps []gap
	var latestAt uint64 // for At: the highest rv observed at or before it
	err := readTopic(ctx, cfg, start, func(r Read) {
		if r.Kind != ReadEvent || resourceOf(r.Key) != cfg.Resource {
			return
		}
		ev := r.Event
		switch ev.Type() {
		case encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted:
			id := ext(ev, encoding.ExtSnapshotID)
			m := snaps[id]
			if m == nil {
				m = &marker{id: id, started: Positions{}}
				snaps[id] = m
				order = append(order, m)
			}
			rv, _ := strconv.ParseUint(ext(ev, encoding.ExtSnapshotRV), 10, 64)
			if ev.Type() == encoding.TypeSnapshotStarted {
				m.started[r.Position.Partition] = r.Position.Offset
				m.startRV = rv
			} else {
				m.completed, m.completeRV, m.completedAt = true, rv, r.Position.Offset
				m.incomplete = m.incomplete || hasExt(ev, encoding.ExtIncomplete)
			}
			if !cfg.At.IsZero() && rv != 0 && !ev.Time().After(cfg.At) {
				latestAt = max(latestAt, rv)
			}
		case encoding.TypeGap:
			var g encoding.Gap
			if json.Unmarshal(ev.Data(), &g) == nil {
				i := slices.IndexFunc(gaps, func(x gap) bool { return x.id == ev.ID() })
				if i < 0 {
					gaps = append(gaps, gap{id: ev.ID(), Gap: g, after: map[string]int64{}})
					i = len(gaps) - 1
				}
				gaps[i].after[r.Position.Partition] = r.Position.Offset
			}
		default:
			if !cfg.At.IsZero() && !ev.Time().After(cfg.At) {
				rv, _ := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
				latestAt = max(latestAt, rv)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if point == 0 {
		point = latestAt
		if point == 0 {
			return nil, fmt.Errorf("%w: no event of %s observed at or before %s is left in topic %s",
				ErrNoSnapshot, cfg.Resource, cfg.At.Format(time.RFC3339), cfg.Topic)
		}
	}
	// The last complete snapshot whose list is at or below the point, and
	// whose started marker is in every partition the scan read.
	var chosen *marker
	incomplete := 0
	for _, m := range order {
		if !m.completed || m.completeRV == 0 || m.completeRV > point || len(m.started) < len(start) {
			continue
		}
		if m.incomplete {
			incomplete++
			continue
		}
		if chosen == nil || m.completeRV > chosen.completeRV || m.completeRV == chosen.completeRV && m.completedAt > chosen.completedAt {
			chosen = m
		}
	}
	if chosen == nil {
		if incomplete > 0 {
			return nil, fmt.Errorf("%w: %d snapshot(s) of %s at or before resourceVersion %d in topic %s are marked incomplete, and no complete one is left",
				ErrIncompleteSnapshot, incomplete, cfg.Resource, point, cfg.Topic)
		}
		return nil, fmt.Errorf("%w: no complete snapshot of %s whose list is at or before resourceVersion %d is left in topic %s (its retention, or a point older than the first snapshot)",
			ErrNoSnapshot, cfg.Resource, point, cfg.Topic)
	}
	for _, g := range gaps {
		from, _ := strconv.ParseUint(g.From, 10, 64)
		to, _ := strconv.ParseUint(g.To, 10, 64)
		read := false
		for p, o := range g.after {
			read = read || o > chosen.started[p]
		}
		// A gap before the snapshot is what the snapshot converged; one
		// after it whose range begins below the point may hide changes
		// up to the point.
		if read && (from < point || g.Backwards) && (to > chosen.completeRV || g.Backwards) {
			ns := ""
			if g.Namespace != "" {
				ns = " in namespace " + g.Namespace
			}
			return nil, fmt.Errorf("%w: changes of %s%s in resourceVersions (%s, %s] may be missing (%s), and the state at %d is built from snapshot %s at %d",
				ErrWatchGapInRange, cfg.Resource, ns, g.From, g.To, g.Reason, point, chosen.id, chosen.completeRV)
		}
	}

	h := &History{View: NewView(Options{Resource: cfg.Resource}), RV: point, Snapshot: chosen.id, SnapshotRV: chosen.completeRV,
		Last: map[string]*event.Event{}, Incomplete: incomplete}
	var refErr error
	err = readTopic(ctx, cfg, chosen.started, func(r Read) {
		if r.Kind != ReadEvent || resourceOf(r.Key) != cfg.Resource {
			// Tombstones follow deletes, which say the same with a
			// version; a tombstone's own time cannot be placed.
			return
		}
		ev := r.Event
		switch ev.Type() {
		case encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted:
			// Only the chosen window prunes: a later snapshot's records
			// above the point are left out, so its completed marker
			// would prune keys that were live at the point.
			if ext(ev, encoding.ExtSnapshotID) != chosen.id {
				return
			}
		case encoding.TypeGap:
			return
		default:
			rv, err := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
			if err != nil || rv > point {
				return
			}
			if ext(ev, encoding.ExtPayload) == encoding.PayloadReference && refErr == nil {
				refErr = fmt.Errorf("%w: %s at resourceVersion %d (event %s) was too large for the broker",
					ErrReferencePayload, r.Key, rv, ev.ID())
			}
		}
		h.View.Apply(r.Position, ev)
		if ev.Type() == encoding.TypeDeleted {
			delete(h.Last, r.Key)
		} else if ev.Type() != encoding.TypeSnapshotStarted && ev.Type() != encoding.TypeSnapshotCompleted {
			if o, ok := h.View.Lookup(r.Key); ok && o.ResourceVersion == ext(ev, encoding.ExtResourceVersion) {
				h.Last[r.Key] = ev
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if refErr != nil {
		return h, refErr
	}
	for k := range h.Last {
		if _, ok := h.View.Lookup(k); !ok {
			delete(h.Last, k)
		}
	}
	return h, nil
}

// readTopic reads every partition of the topic from start (nil: from the
// first offset) up to where it ended when reading began, handing each read
// to onRead in each partition's order. A failure to read ends it.
func readTopic(ctx context.Context, cfg HistoryConfig, start Positions, onRead func(Read)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var failed error
	// A View that keeps nothing: it only carries the source's reads to
	// onRead, in order, each partition caught up where the topic ended.
	scratch := NewView(Options{Resource: "\x00", OnRead: onRead})
	// A short MaxWait: the reading ends where the topic ended, and a fetch
	// there need not wait for records no one asked for.
	src, err := NewKafkaSource(scratch, KafkaConfig{Brokers: cfg.Brokers, Topic: cfg.Topic, Dialer: cfg.Dialer, Start: start, MaxWait: 100 * time.Millisecond,
		OnError: func(err error, _ time.Duration) {
			mu.Lock()
			if failed == nil {
				failed = err
			}
			mu.Unlock()
			cancel()
		}})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	werr := scratch.WaitForSync(ctx)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return fmt.Errorf("consumer: reading topic %s: %w", cfg.Topic, failed)
	}
	return werr
}
