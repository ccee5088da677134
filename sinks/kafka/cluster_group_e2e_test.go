//go:build e2e

package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// groupConverge bounds how long the group may take, once the dispatcher
// delivered its last change, to have read every partition to its end.
const groupConverge = 30 * time.Second

// Issue 28: the consumer side of the rolling restart. Two Views, each fed
// by a KafkaSource of the same consumer group in a goroutine of its own (as
// two processes would be), read the topic a real dispatcher writes while
// the three nodes are restarted in turn with SIGTERM. Each View must apply
// every event of the partitions it reads at most once; every event written
// must be applied by one of them; the newest event of every key must be
// held (or, for a delete, absent) by the View that read it; and once the
// last write was acknowledged, the group must reach the end of every
// partition, and commit it, within groupConverge.
func TestE2EClusterConsumerGroupOfTwoViewsAppliesEveryEventOnceWhileTheBrokersRestartInTurn(t *testing.T) {
	c := kafkatest.StartCluster(t, 3, nil)
	t.Logf("3 nodes ready in %v, resident memory %d MiB", c.Startup.Round(time.Millisecond), c.RSS()>>20)

	l := startClusterLoadOf(t, c, "kafka-cluster-group", false, groupChange)
	group := uniquePrefix(t)
	members := []*groupMember{startGroupMember(t, c, l.topic, group, "A"), startGroupMember(t, c, l.topic, group, "B")}
	testkit.Within(t, 2*time.Minute, "both members of the group to read", func() bool {
		return members[0].readCount() > 0 && members[1].readCount() > 0
	})
	// The group's offsets topic is created on its first use; a rolling
	// restart waits for every partition of the cluster, that one included,
	// to be fully replicated before it stops the next node.
	c.WaitInSync(t, 2*time.Minute, l.topic, "__consumer_offsets")
	overlapBefore := groupOverlap(members)

	for _, b := range c.Brokers {
		l.flowing("before broker " + strconv.Itoa(b.ID) + " stops")
		b.Stop(t)
		t.Logf("%s broker %d stopped", clock(time.Now()), b.ID)
		l.flowing("while broker " + strconv.Itoa(b.ID) + " is down")
		b.Start(t)
		c.WaitInSync(t, 2*time.Minute, l.topic, "__consumer_offsets")
		t.Logf("%s broker %d back in every ISR", clock(time.Now()), b.ID)
	}
	rejoined := time.Now()
	l.flowing("after the rolling restart")
	l.mustHaveMovedLeaders()

	// Stop the producer and let the dispatcher deliver what it holds: from
	// then on the topic's end no longer moves.
	l.halt()
	testkit.Within(t, 2*time.Minute, "the dispatcher to deliver its backlog", func() bool { return l.d.Queued() == 0 })
	drained := time.Now()
	t.Logf("%s the dispatcher delivered its last change", clock(drained))
	// The producer side's own checks: every version in the topic, once,
	// in order. A failure there is not the consumer's.
	l.finish("rolling restart, controlled shutdown (SIGTERM) x3, read by a consumer group of 2")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends := map[int]int64{} // partition -> its end offset
	for _, r := range readTopic(ctx, t, c.Live()[0].Addr, l.topic) {
		ends[r.partition] = max(ends[r.partition], r.offset+1)
	}
	var why string
	// Not testkit.Within: a group that stalls is the finding, and the
	// report below is what explains it.
	reachedEnd := func() bool {
		for p, end := range ends {
			if at := latestRead(members, p); at.offset+1 != end {
				why = fmt.Sprintf("partition %d read to %d of %d", p, at.offset+1, end)
				return false
			}
		}
		committed, err := groupCommitted(ctx, c, group, l.topic, len(ends))
		if err != nil {
			why = err.Error()
			return false
		}
		for p, end := range ends {
			if committed[p] != end {
				why = fmt.Sprintf("partition %d committed at %d of %d", p, committed[p], end)
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(groupConverge)
	tick := time.NewTicker(10 * time.Millisecond)
	for !reachedEnd() && time.Now().Before(deadline) {
		<-tick.C
	}
	tick.Stop()
	stalled := !reachedEnd()
	if stalled {
		t.Errorf("the group did not read and commit every partition to its end within %v of the checks starting: %s", groupConverge, why)
		for p, end := range ends {
			for _, m := range members {
				m.mu.Lock()
				top, ok := m.top[p]
				m.mu.Unlock()
				if ok {
					t.Logf("partition %d (end %d): View %s read to %d, last at %s", p, end, m.name, top.offset+1, clock(top.at))
				}
			}
		}
		// Wait on, to measure: whether the group is stuck or slow, and
		// so that the checks below see everything it reads.
		deadline := time.Now().Add(3 * time.Minute)
		tick := time.NewTicker(10 * time.Millisecond)
		for !reachedEnd() && time.Now().Before(deadline) {
			<-tick.C
		}
		tick.Stop()
		if !reachedEnd() {
			t.Errorf("the group had still not reached the end 3 minutes later: %s", why)
		}
	}
	// When the last record of every partition was first read: the time
	// the group took is measured from the reads, not from this poll,
	// which starts only after the producer side's checks.
	var converged time.Time
	for p, end := range ends {
		for _, m := range members {
			if r, ok := m.readAt(p, end-1); ok && (converged.IsZero() || r.After(converged)) {
				converged = r
			}
		}
	}
	convergeAfterDrain := max(0, converged.Sub(drained))
	// How fast each View read once nothing new was written: the rate at
	// which a lagging member catches up.
	var drainRates []string
	for _, m := range members {
		m.mu.Lock()
		n, last := 0, drained
		for _, r := range m.log {
			if r.at.After(drained) {
				n, last = n+1, r.at
			}
		}
		m.mu.Unlock()
		rate := 0.0
		if d := last.Sub(drained).Seconds(); d > 0 {
			rate = float64(n) / d
		}
		drainRates = append(drainRates, fmt.Sprintf("View %s read %d records in %v after the last write was delivered (%.0f/s)",
			m.name, n, last.Sub(drained).Round(time.Millisecond), rate))
	}
	if !stalled && convergeAfterDrain > groupConverge {
		t.Errorf("the group read the last record %v after the dispatcher delivered it, want at most %v", convergeAfterDrain, groupConverge)
	}
	// Both members, not one that took every partition while the other
	// was stuck: each read after the last node was back.
	for _, m := range members {
		if last := m.lastReadAt(); !last.After(rejoined) {
			t.Errorf("View %s read nothing after the last broker rejoined (last read %v before)", m.name, rejoined.Sub(last).Round(time.Millisecond))
		}
	}

	// Every event written was applied by some View, and none twice by
	// one View.
	l.mu.Lock()
	written := l.written
	l.mu.Unlock()
	appliedRV := map[int]bool{}
	for _, m := range members {
		m.mu.Lock()
		var dups []string
		for id, n := range m.applied {
			appliedRV[m.rvOf[id]] = true
			if n > 1 {
				dups = append(dups, fmt.Sprintf("%s (rv %d) x%d", id, m.rvOf[id], n))
			}
		}
		m.mu.Unlock()
		slices.Sort(dups)
		if len(dups) > 0 {
			t.Errorf("View %s applied %d events more than once: %s", m.name, len(dups), strings.Join(dups[:min(10, len(dups))], ", "))
		}
	}
	events, missing := 0, 0
	for key, rvs := range written {
		for _, rv := range rvs {
			events++
			if !appliedRV[rv] {
				if missing++; missing <= 10 {
					t.Errorf("key %s: resourceVersion %d was written and no View applied it", key, rv)
				}
			}
		}
	}

	// The group's state: for every key, the View that read its newest
	// event holds that version, or nothing if it was a delete. The other
	// View may still hold the key as it was when the key's partition
	// moved away from it: nothing tells a View that it lost a partition.
	divergent, leftovers := 0, 0
	for key, rvs := range written {
		last := rvs[len(rvs)-1]
		deleted := groupChange(last).Op == informer.OpDeleted
		readers := 0
		for _, m := range members {
			o, held := m.view.Lookup(key)
			ok := !held && deleted || held && !deleted && o.ResourceVersion == strconv.Itoa(last)
			if m.lastRVOf(key) != last {
				if !ok {
					leftovers++
				}
				continue
			}
			readers++
			if !ok {
				if divergent++; divergent <= 10 {
					t.Errorf("key %s: View %s read its last change (rv %d, deleted %v) and holds %v at %q", key, m.name, last, deleted, held, o.ResourceVersion)
				}
			}
		}
		if readers == 0 {
			divergent++
			t.Errorf("key %s: no View read its last change, rv %d", key, last)
		}
	}

	// Report.
	var perView []string
	for _, m := range members {
		m.mu.Lock()
		redelivered := 0
		for _, n := range m.reads {
			redelivered += n - 1
		}
		var problems []string
		for reason, n := range m.problems {
			problems = append(problems, fmt.Sprintf("%s %d", reason, n))
		}
		slices.Sort(problems)
		perView = append(perView, fmt.Sprintf("View %s: %d events applied (%d of them deletes of keys not held), %d read again, "+
			"%d duplicates within it, problems [%s], longest pause between two reads %v, %d read errors, synced %v, stats %+v",
			m.name, len(m.applied), m.notHeld, redelivered, countOver(m.applied, 1), strings.Join(problems, ", "),
			m.longestGap.Round(time.Millisecond), len(m.errs), m.view.HasSynced(), m.view.Stats()))
		for i, e := range m.errs {
			if i == 10 {
				perView = append(perView, fmt.Sprintf("  ... %d more", len(m.errs)-10))
				break
			}
			perView = append(perView, "  "+m.name+" read error: "+e)
		}
		m.mu.Unlock()
	}
	overlap := groupOverlap(members)
	t.Logf("consumer group of 2 through a rolling restart: %d events written; %s; applied by both Views: %d (%d of them before the restart); "+
		"partition handovers seen %d; %d events applied by no View; %d keys whose reader diverges, %d stale copies left in the other View; "+
		"last record read %v after the last write was delivered (%v after the last broker rejoined); %s\n%s",
		events, appliedSummary(members), overlap, overlapBefore, handovers(members), missing, divergent, leftovers,
		convergeAfterDrain.Round(time.Millisecond), converged.Sub(rejoined).Round(time.Millisecond), strings.Join(drainRates, "; "),
		strings.Join(perView, "\n"))
}

// groupChange is the change of resourceVersion rv in the group's load:
// clusterKeys objects, each through incarnations of an add, three updates
// and a delete, every incarnation with a uid of its own, as an object
// deleted and created again has.
func groupChange(rv int) *informer.Change {
	name := "cm-" + strconv.Itoa(rv%clusterKeys)
	n := rv / clusterKeys // changes of this object before this one
	op := []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpUpdated, informer.OpUpdated, informer.OpDeleted}[n%5]
	u := sinktest.Object("team-a", name, rv)
	u.SetUID(k8stypes.UID(fmt.Sprintf("uid-%s-%d", name, n/5)))
	return sinktest.ChangeOf(op, u)
}

// groupMember is one member of the consumer group: a View, its
// KafkaSource, and what the View's hooks saw.
type groupMember struct {
	name string
	view *consumer.View
	done chan struct{}

	mu sync.Mutex
	// cur is the id of the message being applied: OnRead is called
	// before the View applies it and the handlers after, in the same
	// goroutine, under the View's apply lock.
	cur string
	// reads counts how many times each event id was read, applied how
	// many times it was applied: a handler call, or a delete of a key the
	// View did not hold (after a handover, the new owner may see the
	// delete of an object only the old one held).
	reads, applied map[string]int
	rvOf           map[string]int // event id -> resourceVersion
	notHeld        int
	problems       map[string]int
	// lastRV is, per key, the resourceVersion of the newest event read
	// (by offset) for it.
	lastRV  map[string]int
	lastOff map[string]int64
	// log is every read: partition, offset, when; top the highest offset
	// read of each partition.
	log        []groupRead
	top        map[int]groupRead
	longestGap time.Duration
	errs       []string
}

type groupRead struct {
	partition int
	offset    int64
	at        time.Time
}

func startGroupMember(t *testing.T, c *kafkatest.Cluster, topic, group, name string) *groupMember {
	t.Helper()
	m := &groupMember{name: name, done: make(chan struct{}), reads: map[string]int{}, applied: map[string]int{},
		rvOf: map[string]int{}, problems: map[string]int{}, lastRV: map[string]int{}, lastOff: map[string]int64{}, top: map[int]groupRead{}}
	m.view = consumer.NewView(consumer.Options{
		OnRead: m.onRead,
		OnProblem: func(p consumer.Problem) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.problems[p.Reason]++
		},
		OnDeleteNotHeld: func(p consumer.Problem) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.notHeld++
			m.applied[p.ID]++
		},
	})
	m.view.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.onApplied() },
		UpdateFunc: func(any, any) { m.onApplied() },
		DeleteFunc: func(any) { m.onApplied() },
	})
	src, err := consumer.NewKafkaSource(m.view, consumer.KafkaConfig{
		Brokers: c.Addrs(), Topic: topic, GroupID: group,
		// Recorded, not logged: the restart makes some, and the report
		// lists them.
		OnError: func(err error, retryIn time.Duration) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.errs = append(m.errs, fmt.Sprintf("%s %v (retry in %v)", clock(time.Now()), err, retryIn))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(m.done)
		_ = src.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-m.done
	})
	return m
}

func (m *groupMember) onRead(r consumer.Read) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := partitionOf(r.Position.Partition)
	if n := len(m.log); n > 0 {
		m.longestGap = max(m.longestGap, now.Sub(m.log[n-1].at))
	}
	gr := groupRead{partition: p, offset: r.Position.Offset, at: now}
	m.log = append(m.log, gr)
	if top, ok := m.top[p]; !ok || gr.offset > top.offset {
		m.top[p] = gr
	}
	switch r.Kind {
	case consumer.ReadEvent:
		id := r.Event.ID()
		m.cur = id
		m.reads[id]++
		rv, _ := strconv.Atoi(fmt.Sprint(r.Event.Extensions()[encoding.ExtResourceVersion]))
		m.rvOf[id] = rv
		if off, ok := m.lastOff[r.Key]; !ok || r.Position.Offset >= off {
			m.lastOff[r.Key], m.lastRV[r.Key] = r.Position.Offset, rv
		}
	default:
		// A tombstone: a handler call for it would be a delete the
		// View had not applied from the event before it.
		m.cur = r.Kind + " " + r.Position.Partition + "@" + strconv.FormatInt(r.Position.Offset, 10)
	}
}

func (m *groupMember) onApplied() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied[m.cur]++
}

func (m *groupMember) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.log)
}

func (m *groupMember) lastReadAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.log) == 0 {
		return time.Time{}
	}
	return m.log[len(m.log)-1].at
}

func (m *groupMember) lastRVOf(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastRV[key]
}

// readAt returns when the member first read offset of partition.
func (m *groupMember) readAt(partition int, offset int64) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.log {
		if r.partition == partition && r.offset == offset {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// latestRead returns the highest offset of partition that any member read.
func latestRead(members []*groupMember, partition int) groupRead {
	best := groupRead{partition: partition, offset: -1}
	for _, m := range members {
		m.mu.Lock()
		if r, ok := m.top[partition]; ok && r.offset > best.offset {
			best = r
		}
		m.mu.Unlock()
	}
	return best
}

// groupOverlap counts the event ids that both members applied.
func groupOverlap(members []*groupMember) int {
	a, b := members[0], members[1]
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for id := range a.applied {
		if b.applied[id] > 0 {
			n++
		}
	}
	return n
}

// handovers counts, over every partition, the times the member reading it
// changed from one read to the next, in the order they happened.
func handovers(members []*groupMember) int {
	type read struct {
		groupRead
		member int
	}
	var all []read
	for i, m := range members {
		m.mu.Lock()
		for _, r := range m.log {
			all = append(all, read{r, i})
		}
		m.mu.Unlock()
	}
	slices.SortStableFunc(all, func(x, y read) int { return x.at.Compare(y.at) })
	last := map[int]int{}
	n := 0
	for _, r := range all {
		if prev, ok := last[r.partition]; ok && prev != r.member {
			n++
		}
		last[r.partition] = r.member
	}
	return n
}

func appliedSummary(members []*groupMember) string {
	var parts []string
	for _, m := range members {
		m.mu.Lock()
		parts = append(parts, fmt.Sprintf("applied by View %s: %d", m.name, len(m.applied)))
		m.mu.Unlock()
	}
	return strings.Join(parts, ", ")
}

func countOver(counts map[string]int, n int) int {
	k := 0
	for _, c := range counts {
		if c > n {
			k++
		}
	}
	return k
}

// partitionOf returns the partition number of a View's partition name,
// "<topic>/<partition>".
func partitionOf(name string) int {
	p, _ := strconv.Atoi(name[strings.LastIndexByte(name, '/')+1:])
	return p
}

// groupCommitted reads the group's committed offsets of the topic's
// partitions 0 to n-1.
func groupCommitted(ctx context.Context, c *kafkatest.Cluster, group, topic string, n int) (map[int]int64, error) {
	var addrs []string
	for _, b := range c.Live() {
		addrs = append(addrs, b.Addr)
	}
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(addrs...), Timeout: 10 * time.Second, Transport: tr}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	res, err := cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("offset of group %s in %s/%d: %w", group, topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// clock formats a time of the run for the log, to the millisecond.
func clock(at time.Time) string { return at.Format("15:04:05.000") }
