package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// VersionsConfig says which object Versions reads, from which topic, and
// the range of its versions.
type VersionsConfig struct {
	// Brokers, Topic and Dialer are as in KafkaConfig.
	Brokers []string
	Topic   string
	Dialer  *kafkago.Dialer
	// Key is the object's partition key: <resource>/<namespace>/<name>, or
	// <resource>/<name> for a cluster-scoped object. Required.
	Key string
	// SinceRV and Since start the range: the versions at or above SinceRV,
	// or those observed after Since. A time is turned into the highest
	// resourceVersion of the resource's events observed at or before it,
	// as HistoryConfig.At is, because the range is decided by version:
	// timestamps need not rise within a partition. Both zero: from the
	// oldest record the topic keeps.
	SinceRV uint64
	Since   time.Time
	// UntilRV and Until end the range the same way, inclusive. Both zero:
	// up to where the topic ended when reading began.
	UntilRV uint64
	Until   time.Time
	// Lookback is how far before the start of the range the scan starts,
	// as HistoryConfig.Lookback: snapshotInterval plus a margin. Default
	// 15m.
	Lookback time.Duration
	// WatchPerNamespace is as in HistoryConfig: the partitions of a
	// resource watched per namespace are read to their end.
	WatchPerNamespace bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Version is one version of an object, as an event carried it.
type Version struct {
	// Type is the short event type: added, updated, deleted or synced.
	Type string
	// RV is the object's resourceVersion in the event.
	RV uint64
	// Time is when kubewire observed the change (the event's time).
	Time time.Time
	// ChangedBy is the field manager of the object's newest managedFields
	// entry: the client that wrote it, not the user. Only the API
	// server's audit log knows who made a change. Empty for deletes.
	ChangedBy string
	// Event is the event itself; its data is the object. Do not modify it.
	Event *event.Event
}

// ObjectVersions are the versions of one object in a range.
type ObjectVersions struct {
	Key string
	// Since and Until are the range as resourceVersions: the versions
	// above Since and at or below Until.
	Since, Until uint64
	// Before is the object's newest version at or below Since that the scan
	// read, if any: what the first version in the range changed.
	Before *Version
	// Versions are in resourceVersion order, each once.
	Versions []Version
	// Read counts the records read to answer, over every scan.
	Read int64
}

// Versions reads every version of one object in a range from a topic
// written by kubewire's Kafka sink: each live change once (duplicates of
// at-least-once delivery dropped), and a snapshot record only where it
// carries a version no event before it did, which is how a change that a
// relist caught reaches the stream.
//
// It proves the range's start before it answers: the scan must hold a
// complete snapshot whose list is at or below the start (every later
// version of the object follows its started marker), or every partition
// from offset 0. Otherwise it fails with ErrNoSnapshot. A declared watch
// gap that overlaps the range (ErrWatchGapInRange) or a version that
// carries a reference instead of its object (ErrReferencePayload) is
// returned together with the versions that were read: each of them is a
// real version, but the list may lack some, or their content.
//
// With an end to the range, each partition is read only until nothing
// after it can be a version at or below the end, by the rule HistoryAt
// stops by.
func Versions(ctx context.Context, cfg VersionsConfig) (*ObjectVersions, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.Key == "" {
		return nil, errors.New("consumer: versions needs brokers, a topic and a key")
	}
	if cfg.Dialer == nil {
		cfg.Dialer = kafkago.DefaultDialer
	}
	probe := &KafkaSource{cfg: KafkaConfig{Brokers: cfg.Brokers, Topic: cfg.Topic, Dialer: cfg.Dialer}}
	parts, err := probe.partitions(ctx)
	if err != nil {
		return nil, err
	}
	whole := true // nothing was ever deleted from the topic
	for _, b := range parts {
		whole = whole && b.first == 0
	}
	return versionsIn(ctx, cfg, versionsSource{
		where: "topic " + cfg.Topic, whole: whole,
		start: func(ctx context.Context, t time.Time) (Positions, bool, error) {
			return historyStart(ctx, probe, parts, t)
		},
		read: func(ctx context.Context, start Positions, onRead func(Read) bool) (int64, error) {
			return readKafka(ctx, probe, parts, start, onRead)
		},
	})
}

// versionsSource is a topic or a stream as Versions reads it.
type versionsSource struct {
	where string // "topic T", "stream S": for messages
	// whole says nothing was ever deleted from it.
	whole bool
	// start is, per partition, the first position stored at or after t;
	// all says each is the partition's first.
	start func(ctx context.Context, t time.Time) (start Positions, all bool, err error)
	// read is as historyQuery.read.
	read func(ctx context.Context, start Positions, onRead func(Read) bool) (int64, error)
}

// versionsIn is Versions for any source.
func versionsIn(ctx context.Context, cfg VersionsConfig, src versionsSource) (*ObjectVersions, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = 15 * time.Minute
	}
	from := cfg.Since
	if from.IsZero() {
		from = cfg.Now()
	}
	lookback := cfg.Lookback
	var read int64
	for {
		var start Positions
		all := true
		bounded := cfg.SinceRV != 0 || !cfg.Since.IsZero()
		var err error
		if bounded {
			if start, all, err = src.start(ctx, from.Add(-lookback)); err != nil {
				return nil, err
			}
		}
		s, n, err := scanVersions(ctx, cfg, src.read, start)
		read += n
		if err != nil {
			return nil, err
		}
		// Without a start, the range is what the topic keeps.
		if !bounded || s.proven(start) || all && src.whole {
			vs, err := s.answer(cfg)
			vs.Read = read
			return vs, err
		}
		if all {
			return nil, fmt.Errorf("%w: %s no longer holds the start of the range of %s (resourceVersion %d): no complete snapshot at or below it is left, and retention dropped the first records",
				ErrNoSnapshot, src.where, cfg.Key, s.since)
		}
		lookback *= 4
	}
}

// versionScan is what one read of the topic learned about the object and
// its resource.
type versionScan struct {
	key, resource, namespace string
	since, until             uint64
	snaps                    map[string]*marker
	gaps                     []encoding.Gap
	gapIDs                   map[string]bool
	events                   []*event.Event // the object's, in read order
	sinceAt, untilAt         uint64         // highest rv observed at or before Since, Until
}

func scanVersions(ctx context.Context, cfg VersionsConfig, read func(context.Context, Positions, func(Read) bool) (int64, error), start Positions) (*versionScan, int64, error) {
	s := &versionScan{key: cfg.Key, resource: resourceOf(cfg.Key), snaps: map[string]*marker{}, gapIDs: map[string]bool{}}
	if p := strings.Split(cfg.Key, "/"); len(p) == 3 {
		s.namespace = p[1]
	}
	observed := func(ev *event.Event, rv uint64) {
		if !cfg.Since.IsZero() && !ev.Time().After(cfg.Since) {
			s.sinceAt = max(s.sinceAt, rv)
		}
		if !cfg.Until.IsZero() && !ev.Time().After(cfg.Until) {
			s.untilAt = max(s.untilAt, rv)
		}
	}
	// The end of the range is a point as HistoryAt's: nothing after its
	// stop is a version at or below it. Without an end, nothing stops.
	ends := newStops(cfg.UntilRV, cfg.Until, cfg.WatchPerNamespace)
	n, err := read(ctx, start, func(r Read) bool {
		if r.Kind != ReadEvent || resourceOf(r.Key) != s.resource {
			return false
		}
		ev := r.Event
		end := ends.of(r.Position.Partition).next(ev)
		switch ev.Type() {
		case encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted:
			id := ext(ev, encoding.ExtSnapshotID)
			m := s.snaps[id]
			if m == nil {
				m = &marker{id: id, started: Positions{}}
				s.snaps[id] = m
			}
			rv, _ := strconv.ParseUint(ext(ev, encoding.ExtSnapshotRV), 10, 64)
			if ev.Type() == encoding.TypeSnapshotStarted {
				m.started[r.Position.Partition] = r.Position.Offset
				m.startRV = rv
			} else {
				m.completed, m.completeRV = true, rv
				m.incomplete = m.incomplete || hasExt(ev, encoding.ExtIncomplete)
			}
			if rv != 0 {
				observed(ev, rv)
			}
		case encoding.TypeGap:
			var g encoding.Gap
			if json.Unmarshal(ev.Data(), &g) == nil && !s.gapIDs[ev.ID()] {
				s.gapIDs[ev.ID()] = true
				s.gaps = append(s.gaps, g)
			}
		default:
			rv, _ := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
			observed(ev, rv)
			if r.Key == s.key {
				s.events = append(s.events, ev)
			}
		}
		return end
	})
	if err != nil {
		return nil, n, err
	}
	s.since, s.until = 0, math.MaxUint64
	switch {
	case cfg.SinceRV != 0:
		s.since = cfg.SinceRV - 1
	case !cfg.Since.IsZero():
		s.since = s.sinceAt
	}
	switch {
	case cfg.UntilRV != 0:
		s.until = cfg.UntilRV
	case !cfg.Until.IsZero():
		s.until = s.untilAt
	}
	return s, n, nil
}

// proven says the scan began before a complete snapshot whose list is at
// or below the range's start, in every partition: all versions above it
// follow that snapshot's started marker.
func (s *versionScan) proven(start Positions) bool {
	for _, m := range s.snaps {
		if m.completed && !m.incomplete && m.completeRV != 0 && m.completeRV <= s.since && spans(m, start, s.snaps) {
			return true
		}
	}
	return false
}

// answer picks the object's versions in the range and says what the
// stream cannot vouch for.
func (s *versionScan) answer(cfg VersionsConfig) (*ObjectVersions, error) {
	out := &ObjectVersions{Key: s.key, Since: s.since, Until: s.until}
	seen := map[uint64][]string{} // rv → the types already taken
	var errs []error
	for _, ev := range s.events {
		rv, err := strconv.ParseUint(ext(ev, encoding.ExtResourceVersion), 10, 64)
		if err != nil {
			continue
		}
		typ := strings.TrimPrefix(ev.Type(), encoding.TypePrefix+"object.")
		// A snapshot record of a version already read says nothing new;
		// the same type at the same version is a redelivery.
		if typ == "synced" && len(seen[rv]) > 0 || slices.Contains(seen[rv], typ) {
			continue
		}
		seen[rv] = append(seen[rv], typ)
		v := Version{Type: typ, RV: rv, Time: ev.Time(), ChangedBy: ext(ev, encoding.ExtChangedBy), Event: ev}
		switch {
		case rv <= s.since:
			if out.Before == nil || rv >= out.Before.RV {
				out.Before = &v
			}
		case rv <= s.until:
			out.Versions = append(out.Versions, v)
			if ext(ev, encoding.ExtPayload) == encoding.PayloadReference && len(errs) == 0 {
				errs = append(errs, fmt.Errorf("%w: %s at resourceVersion %d (event %s) was too large for the broker",
					ErrReferencePayload, s.key, rv, ev.ID()))
			}
		}
	}
	// Versions of one key sit in one partition in version order; a
	// redelivery after a restart can put an old one later.
	slices.SortStableFunc(out.Versions, func(a, b Version) int {
		switch {
		case a.RV < b.RV:
			return -1
		case a.RV > b.RV:
			return 1
		}
		return 0
	})
	for _, g := range s.gaps {
		if g.Namespace != "" && g.Namespace != s.namespace {
			continue
		}
		from, _ := strconv.ParseUint(g.From, 10, 64)
		to, _ := strconv.ParseUint(g.To, 10, 64)
		// Versions in (from, to] may be missing; any overlap with the
		// range means the list may lack some.
		if g.Backwards || from < s.until && to > s.since {
			errs = append([]error{fmt.Errorf("%w: versions of %s in resourceVersions (%s, %s] may be missing (%s)",
				ErrWatchGapInRange, s.key, g.From, g.To, g.Reason)}, errs...)
		}
	}
	return out, errors.Join(errs...)
}
