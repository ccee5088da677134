package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks/kafka"
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
	// WatchPerNamespace says kubewire watches the resource per namespace
	// (config.Resource.PerNamespaceWatch): its namespaces' watches run
	// apart, so their events do not come in version order, and every
	// partition is read to its end.
	WatchPerNamespace bool
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
	// Read counts the records read to answer, over every scan: the cost
	// of the answer, which follows what lies between the snapshot and the
	// point rather than the length of the topic.
	Read int64
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
	q := historyQuery{resource: cfg.Resource, rv: cfg.RV, at: cfg.At, where: "topic " + cfg.Topic, perNamespace: cfg.WatchPerNamespace,
		read: func(ctx context.Context, start Positions, onRead func(Read) bool) (int64, error) {
			return readKafka(ctx, probe, parts, start, onRead)
		}}
	lookback := cfg.Lookback
	var read int64
	for {
		start, all, err := historyStart(ctx, probe, parts, from.Add(-lookback))
		if err != nil {
			return nil, err
		}
		h, n, err := historyFrom(ctx, q, start)
		read += n
		if h != nil {
			h.Read = read
		}
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

// historyQuery is what historyFrom answers, whatever the broker.
type historyQuery struct {
	resource     string
	rv           uint64
	at           time.Time
	where        string // "topic T", "stream S": for messages
	perNamespace bool
	// read reads every partition from start (nil: from its first
	// position) up to where it ended when reading began, handing each
	// read to onRead in each partition's order, one call at a time; a
	// partition ends early once onRead returns true for it. It returns
	// how many records it read.
	read func(ctx context.Context, start Positions, onRead func(Read) bool) (int64, error)
}

// historyFrom scans the topic from start for the resource's snapshots and
// gaps, picks the snapshot, and applies the window from it. It returns
// how many records it read.
func historyFrom(ctx context.Context, cfg historyQuery, start Positions) (*History, int64, error) {
	point := cfg.rv
	snaps := map[string]*marker{}
	var order []*marker
	type gap struct {
		id string
		encoding.Gap
		after map[string]int64 // offset per partition
	}
	var gaps []gap
	var latestAt uint64 // for At: the highest rv observed at or before it
	var total int64
	// The scan's stop: for a time, the first started marker stamped after
	// it; for a version, the rule of stopAt.
	scanStop := newStops(cfg.rv, cfg.at, cfg.perNamespace)
	n, err := cfg.read(ctx, start, func(r Read) bool {
		if r.Kind != ReadEvent || resourceOf(r.Key) != cfg.resource {
			return false
		}
		ev := r.Event
		stop := scanStop.of(r.Position.Partition).next(ev)
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
			if !cfg.at.IsZero() && rv != 0 && !ev.Time().After(cfg.at) {
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
			if !cfg.at.IsZero() && !ev.Time().After(cfg.at) {
				rv, _ := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
				latestAt = max(latestAt, rv)
			}
		}
		return stop
	})
	total += n
	if err != nil {
		return nil, total, err
	}
	if point == 0 {
		point = latestAt
		if point == 0 {
			return nil, total, fmt.Errorf("%w: no event of %s observed at or before %s is left in %s",
				ErrNoSnapshot, cfg.resource, cfg.at.Format(time.RFC3339), cfg.where)
		}
	}
	// The last complete snapshot whose list is at or below the point, and
	// whose started marker is in every partition the scan read, or that
	// partition was added after it (spans).
	var chosen *marker
	incomplete := 0
	for _, m := range order {
		if !m.completed || m.completeRV == 0 || m.completeRV > point || !spans(m, start, snaps) {
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
			return nil, total, fmt.Errorf("%w: %d snapshot(s) of %s at or before resourceVersion %d in %s are marked incomplete, and no complete one is left",
				ErrIncompleteSnapshot, incomplete, cfg.resource, point, cfg.where)
		}
		return nil, total, fmt.Errorf("%w: no complete snapshot of %s whose list is at or before resourceVersion %d is left in %s (its retention, or a point older than the first snapshot)",
			ErrNoSnapshot, cfg.resource, point, cfg.where)
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
			return nil, total, fmt.Errorf("%w: changes of %s%s in resourceVersions (%s, %s] may be missing (%s), and the state at %d is built from snapshot %s at %d",
				ErrWatchGapInRange, cfg.resource, ns, g.From, g.To, g.Reason, point, chosen.id, chosen.completeRV)
		}
	}

	h := &History{View: NewView(Options{Resource: cfg.resource}), RV: point, Snapshot: chosen.id, SnapshotRV: chosen.completeRV,
		Last: map[string]*event.Event{}, Incomplete: incomplete}
	var refErr error
	applyStop := newStops(point, time.Time{}, cfg.perNamespace)
	n, err = cfg.read(ctx, chosen.started, func(r Read) bool {
		if r.Kind != ReadEvent || resourceOf(r.Key) != cfg.resource {
			// Tombstones follow deletes, which say the same with a
			// version; a tombstone's own time cannot be placed.
			return false
		}
		ev := r.Event
		stop := applyStop.of(r.Position.Partition).next(ev)
		switch ev.Type() {
		case encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted:
			// Only the chosen window prunes: a later snapshot's records
			// above the point are left out, so its completed marker
			// would prune keys that were live at the point.
			if ext(ev, encoding.ExtSnapshotID) != chosen.id {
				return stop
			}
		case encoding.TypeGap:
			return stop
		default:
			rv, err := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
			if err != nil || rv > point {
				return stop
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
		return stop
	})
	total += n
	if err != nil {
		return nil, total, err
	}
	if refErr != nil {
		return h, total, refErr
	}
	for k := range h.Last {
		if _, ok := h.View.Lookup(k); !ok {
			delete(h.Last, k)
		}
	}
	return h, total, nil
}

// readKafka reads each partition of the topic from start (the first
// offset for a partition start does not name) up to the end it had when
// parts was read, as historyQuery.read says.
func readKafka(ctx context.Context, s *KafkaSource, parts map[int]bounds, start Positions, onRead func(Read) bool) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // one onRead at a time
	var read atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(parts))
	for p, b := range parts {
		from, ok := start[KafkaPartition(s.cfg.Topic, p)]
		if !ok || from < b.first {
			from = b.first
		}
		if from >= b.end {
			continue
		}
		wg.Go(func() {
			if err := readKafkaPartition(ctx, s, p, from, b.end, &read, func(r Read) bool {
				mu.Lock()
				defer mu.Unlock()
				return onRead(r)
			}); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return read.Load(), fmt.Errorf("consumer: reading topic %s: %w", s.cfg.Topic, err)
	}
	return read.Load(), nil
}

func readKafkaPartition(ctx context.Context, s *KafkaSource, partition int, from, end int64, read *atomic.Int64, onRead func(Read) bool) error {
	// A short MaxWait: the reading ends where the partition ended, and a
	// fetch there need not wait for records no one asked for.
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: s.cfg.Brokers, Topic: s.cfg.Topic, Partition: partition, Dialer: s.cfg.Dialer,
		IsolationLevel: kafkago.ReadCommitted, MaxWait: 100 * time.Millisecond, OffsetOutOfRangeError: true,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return err
	}
	name := KafkaPartition(s.cfg.Topic, partition)
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			// Retention that deletes the range under the reader is a
			// failure too: what was decided from it is gone.
			return fmt.Errorf("partition %d after offset %d: %w", partition, from, err)
		}
		read.Add(1)
		rd := Read{Kind: ReadTombstone, Position: Position{Partition: name, Offset: m.Offset}, Key: string(m.Key)}
		if m.Value != nil {
			if ev, err := kafka.DecodeMessage(m); err != nil {
				rd.Kind, rd.Err = ReadMalformed, err
			} else {
				rd.Kind, rd.Event, rd.Key = ReadEvent, ev, ext(ev, encoding.ExtPartitionKey)
			}
		}
		// A transaction's control records take offsets never delivered,
		// so the end is reached by offset, not by count.
		if onRead(rd) || m.Offset+1 >= end {
			return nil
		}
		from = m.Offset
	}
}
