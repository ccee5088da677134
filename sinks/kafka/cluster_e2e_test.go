//go:build e2e

package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// Faults of a real three-node cluster, one after the other on the same
// cluster (starting one costs seconds and half a gigabyte), each under
// steady load through a real dispatcher into a topic of its own with six
// partitions and three replicas. Each first checks that the fault happened
// (a leader moved, or the in-sync replicas shrank, while records were
// flowing), then that the topic holds every version written, once, in
// order per key; that the broker never refused the producer's sequence;
// and that delivery resumed within maxResume of every partition being
// writable again.
func TestE2EClusterOfThreeBrokersKeepsEveryChangeOnceAndInOrderWhileLeadersMove(t *testing.T) {
	c := kafkatest.StartCluster(t, 3, nil)
	t.Logf("3 nodes ready in %v, resident memory %d MiB", c.Startup.Round(time.Millisecond), c.RSS()>>20)
	t.Cleanup(func() { printClusterFaults(t) })

	t.Run("a rolling restart with controlled shutdown", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-rolling", false)
		for _, b := range c.Brokers {
			l.flowing("before broker " + strconv.Itoa(b.ID) + " stops")
			b.Stop(t)
			l.flowing("while broker " + strconv.Itoa(b.ID) + " is down")
			b.Start(t)
			c.WaitInSync(t, time.Minute, l.topic)
		}
		l.flowing("after the rolling restart")
		l.mustHaveMovedLeaders()
		l.finish("rolling restart, controlled shutdown (SIGTERM) x3")
	})

	t.Run("the broker leading most partitions killed and restarted", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-kill", false)
		l.flowing("before the kill")
		b := c.Broker(l.busiestLeader())
		b.Kill()
		l.flowing("after broker " + strconv.Itoa(b.ID) + " was killed")
		b.Start(t)
		c.WaitInSync(t, time.Minute, l.topic)
		l.flowing("after broker " + strconv.Itoa(b.ID) + " rejoined")
		l.mustHaveMovedLeaders()
		l.finish("SIGKILL of the busiest leader, restart")
	})

	t.Run("leadership moved by reassignment and preferred leader election", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-elect", false)
		for round := 1; round <= 2; round++ {
			l.flowing("before election " + strconv.Itoa(round))
			l.rotateLeaders()
		}
		l.flowing("after the elections")
		l.mustHaveMovedLeaders()
		l.finish("preferred leader election after reassignment x2")
	})

	t.Run("a broker frozen until it leaves the in-sync replicas", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-pause", false)
		l.flowing("before the pause")
		// A broker that leads partitions: its followers' and its own
		// partitions both stall, for the ISR and for leadership.
		b := c.Broker(l.busiestLeader())
		b.Pause()
		// The broker leaves the in-sync replicas after
		// replica.lag.time.max.ms, or when the controller fences it for
		// missing heartbeats, whichever comes first.
		l.waitISRWithout(b.ID)
		l.flowing("while broker " + strconv.Itoa(b.ID) + " is frozen")
		b.Resume()
		c.WaitInSync(t, time.Minute, l.topic)
		l.flowing("after broker " + strconv.Itoa(b.ID) + " rejoined")
		l.mustHaveShrunkISR()
		l.finish("SIGSTOP of a leader past replica.lag.time.max.ms, SIGCONT")
	})

	t.Run("a frozen leader holds back only the partitions it leads", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-stall", false)
		l.flowing("before the freeze")
		b := c.Broker(l.busiestLeader())
		own := l.isolate(b.ID)
		l.flowing("after broker " + strconv.Itoa(b.ID) + " was left leading partitions " + fmt.Sprint(own) + " alone")
		others := slices.DeleteFunc([]int{0, 1, 2, 3, 4, 5}, func(p int) bool { return slices.Contains(own, p) })
		b.Pause()
		frozen := time.Now()
		// The sink waits StallAfter for an unanswered request before it
		// counts the partition stalled: that much of a stall is its
		// documented cost, and the rate is measured from there on.
		<-time.After(time.Until(frozen.Add(kafka.StallAfter())))
		w0, o0 := l.writtenTo(), l.endOffsets(others, b.ID)
		from := time.Now()
		// Measured while the frozen broker still leads its partitions:
		// once the controller moves them (after the broker session
		// timeout, 9 s), a dispatcher that waited for them catches up,
		// and a window that ran on would hide the stall.
		led := l.whileLeading(b.ID, own, frozen, stallFreeze)
		w1, o1 := l.writtenTo(), l.endOffsets(others, b.ID)
		window := time.Since(from)
		// The fault lasts stallFreeze; nothing is waited for.
		<-time.After(time.Until(frozen.Add(stallFreeze)))
		b.Resume()
		t.Logf("measured for %v, from %v after broker %d was frozen (%s)", window.Round(time.Millisecond), kafka.StallAfter(), b.ID, led)
		for _, p := range others {
			written, published := w1[p]-w0[p], o1[p]-o0[p]
			t.Logf("partition %d, led by another broker: %d changes written and %d records published (%.0f%%)",
				p, written, published, 100*float64(published)/float64(max(written, 1)))
			if written == 0 || float64(published) < 0.8*float64(written) {
				t.Errorf("partition %d published %d records while %d changes were written to it; want at least 80%%", p, published, written)
			}
		}
		c.WaitInSync(t, time.Minute, l.topic)
		l.flowing("after broker " + strconv.Itoa(b.ID) + " was resumed")
		l.finish("SIGSTOP 15 s of the leader of 2 partitions whose other partitions have no replica on it, SIGCONT")
	})

	t.Run("two brokers down spool everything and deliver once one returns", func(t *testing.T) {
		l := startClusterLoad(t, c, "kafka-cluster-quorum", true)
		l.flowing("before the outage")
		down := []*kafkatest.Broker{c.Broker(l.busiestLeader())}
		for _, b := range c.Brokers {
			if b != down[0] && len(down) < 2 {
				down = append(down, b)
			}
		}
		for _, b := range down {
			b.Kill()
		}
		// No partition can take a record: min.insync.replicas is 2 and
		// the controller quorum is lost. The dispatcher spools.
		mark := metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": l.name})
		testkit.Within(t, time.Minute, "the dispatcher to spool", func() bool {
			return metrics.Sum("kubewire_spool_written_total", map[string]string{"sink": l.name}) > mark+1000
		})
		down[0].Start(t)
		l.flowing("after broker " + strconv.Itoa(down[0].ID) + " returned")
		down[1].Start(t)
		c.WaitInSync(t, time.Minute, l.topic)
		l.flowing("after broker " + strconv.Itoa(down[1].ID) + " returned")
		// Nothing was acknowledged during the outage, so no leader moved
		// "while records flowed"; what shows the fault is the controller,
		// once it has a quorum again, dropping the dead node from the
		// in-sync replicas while the backlog waits.
		l.mustHaveShrunkISR()
		l.finish("2 of 3 brokers SIGKILLed (no ISR quorum, no KRaft quorum), spool")
	})
	t.Logf("resident memory of the 3 nodes after the faults: %d MiB", c.RSS()>>20)
}

// maxResume bounds how long delivery may stay stalled once every partition
// is writable again (see resumeDelay).
const maxResume = 10 * time.Second

// clusterLoad is one fault's load: a dispatcher and its sink, a goroutine
// that enqueues changes without pause, and watchers that record when the
// sink's acknowledged records moved and what the cluster said of the
// topic's partitions.
type clusterLoad struct {
	t     *testing.T
	c     *kafkatest.Cluster
	name  string
	topic string
	d     *dispatch.Dispatcher

	// change makes the change of resourceVersion rv; nil is an update
	// of one of clusterKeys objects that are never deleted.
	change func(rv int) *informer.Change

	mu      sync.Mutex
	written map[string][]int // key -> resourceVersions enqueued, in order
	changes int

	// base are the sink's counters when the load started: a sink's
	// series outlive it, and -count runs the fault again under its name.
	base struct{ acked, seqErrors, resends float64 }

	stop    chan struct{}
	churned chan struct{}
	watched sync.WaitGroup
	start   time.Time

	tmu     sync.Mutex
	acks    []time.Time // when the acknowledged records counter moved
	samples []sample
}

// sample is what the cluster said of the topic at one moment.
type sample struct {
	at    time.Time
	parts []kafkatest.Partition
	// writable: every partition has a live leader and at least
	// min.insync.replicas in-sync replicas, all of them live. A produce
	// with acks=all waits for every in-sync replica, so a frozen or dead
	// one that is still listed stalls the partition.
	writable bool
	// queued is the dispatcher's backlog then.
	queued int
}

// startClusterLoad starts a dispatcher into a sink named name, configured
// with every node of c, and about 300 changes a second over 40 keys. With
// spooled, the dispatcher has a disk spool and a small memory buffer, so
// an outage fills the spool.
func startClusterLoad(t *testing.T, c *kafkatest.Cluster, name string, spooled bool) *clusterLoad {
	t.Helper()
	return startClusterLoadOf(t, c, name, spooled, nil)
}

// startClusterLoadOf is startClusterLoad with the changes made by change
// (see clusterLoad.change).
func startClusterLoadOf(t *testing.T, c *kafkatest.Cluster, name string, spooled bool, change func(rv int) *informer.Change) *clusterLoad {
	t.Helper()
	heal(t, c)
	prefix := uniquePrefix(t)
	kc := &kafka.Config{
		Brokers: c.Addrs(),
		Topic:   prefix + ".{group}.{resource}",
		// Acks and Idempotent are left at their defaults (all, on): what
		// is under test.
		CreateTopics: &kafka.CreateTopics{Partitions: 6, ReplicationFactor: 3},
		// A request to a frozen leader is answered by nothing: the
		// partition waits it out, and the copy it resends may go to the
		// same leader if the controller has not moved leadership yet. So
		// delivery resumes up to about requestTimeout + MetadataTTL after
		// a frozen leader is replaced: 5s keeps that under maxResume; the
		// default, 30s, would not (docs/reliability.md).
		RequestTimeout: config.NewDuration(5 * time.Second),
		DialTimeout:    config.NewDuration(2 * time.Second),
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := kafka.New(name, kc, sinks.Deps{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	o := dispatch.Options{
		Shards:       4,
		BatchSize:    20,
		RetryInitial: 20 * time.Millisecond,
		RetryMax:     500 * time.Millisecond,
		// Big enough that nothing is conflated in memory: every version
		// must reach the topic.
		BufferEvents: 1 << 20,
		Logger:       logger,
	}
	if spooled {
		o.BufferEvents = 500
	}
	d := dispatch.NewDispatcher(name, s, o)
	if spooled {
		if err := d.UseSpool(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
			t.Fatal(err)
		}
	}
	d.Start()
	l := &clusterLoad{t: t, c: c, name: name, topic: widgetTopic(prefix), d: d, change: change, written: map[string][]int{},
		stop: make(chan struct{}), churned: make(chan struct{}), start: time.Now()}
	l.base.acked = l.acked()
	l.base.seqErrors = l.seqErrors()
	l.base.resends = l.resends()
	go l.churn()
	l.watched.Add(2)
	go l.watchAcks()
	go l.watchPartitions()
	t.Cleanup(func() {
		l.halt()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		d.Close(ctx)
	})
	testkit.Within(t, time.Minute, "the topic to take records", func() bool { return l.acked() > l.base.acked+100 })
	c.WaitInSync(t, time.Minute, l.topic)
	return l
}

// heal brings every node of c back, in case an earlier fault failed
// half-way.
func heal(t *testing.T, c *kafkatest.Cluster) {
	t.Helper()
	for _, b := range c.Brokers {
		if !b.Running() {
			b.Start(t)
		} else if !b.Live() {
			b.Resume()
		}
	}
}

const clusterKeys = 40

func (l *clusterLoad) churn() {
	defer close(l.churned)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	rv := 0
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		for range 3 {
			rv++
			var ch *informer.Change
			if l.change != nil {
				ch = l.change(rv)
			} else {
				ch = sinktest.Change(informer.OpUpdated, "team-a", "cm-"+strconv.Itoa(rv%clusterKeys), rv)
			}
			// The record timestamp is the event's time; a restarted
			// broker forgets producers whose newest record is older than
			// producer.id.expiration.ms, and the suite's fixed time is.
			ch.Observed = time.Now()
			l.mu.Lock()
			l.written[ch.Key] = append(l.written[ch.Key], rv)
			l.changes++
			l.mu.Unlock()
			l.d.Enqueue(dispatch.NewItem(ch))
		}
	}
}

func (l *clusterLoad) acked() float64 {
	return metrics.Sum("kubewire_kafka_records_total", map[string]string{"sink": l.name})
}

func (l *clusterLoad) seqErrors() float64 {
	return metrics.Sum("kubewire_kafka_producer_sequence_errors_total", map[string]string{"sink": l.name})
}

func (l *clusterLoad) resends() float64 {
	return metrics.Sum("kubewire_kafka_produce_resends_total", map[string]string{"sink": l.name})
}

func (l *clusterLoad) watchAcks() {
	defer l.watched.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := l.acked()
	for {
		select {
		case <-l.stop:
			return
		case now := <-tick.C:
			if n := l.acked(); n != last {
				last = n
				l.tmu.Lock()
				l.acks = append(l.acks, now)
				l.tmu.Unlock()
			}
		}
	}
}

func (l *clusterLoad) watchPartitions() {
	defer l.watched.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		live := map[int]bool{}
		for _, b := range l.c.Live() {
			live[b.ID] = true
		}
		queued := l.d.Queued()
		ps, err := l.c.Partitions(context.Background(), l.topic)
		if err != nil {
			continue
		}
		s := sample{at: time.Now(), parts: ps, writable: true, queued: queued}
		for _, p := range ps {
			ok := live[p.Leader] && len(p.ISR) >= 2
			for _, r := range p.ISR {
				ok = ok && live[r]
			}
			s.writable = s.writable && ok
		}
		l.tmu.Lock()
		l.samples = append(l.samples, s)
		l.tmu.Unlock()
	}
}

// flowing waits until another 300 records are acknowledged.
func (l *clusterLoad) flowing(when string) {
	l.t.Helper()
	mark := l.acked()
	testkit.Within(l.t, 90*time.Second, "records to flow "+when, func() bool { return l.acked() > mark+300 })
}

// latest returns the newest sample.
func (l *clusterLoad) latest() sample {
	l.t.Helper()
	var s sample
	testkit.Within(l.t, 30*time.Second, "the partitions of "+l.topic, func() bool {
		l.tmu.Lock()
		defer l.tmu.Unlock()
		if len(l.samples) == 0 {
			return false
		}
		s = l.samples[len(l.samples)-1]
		return true
	})
	return s
}

// busiestLeader returns the node that leads most of the topic's partitions.
func (l *clusterLoad) busiestLeader() int {
	l.t.Helper()
	n := map[int]int{}
	best := 0
	for _, p := range l.latest().parts {
		if n[p.Leader]++; best == 0 || n[p.Leader] > n[best] {
			best = p.Leader
		}
	}
	l.t.Logf("broker %d leads %d of the %d partitions", best, n[best], 6)
	return best
}

// rotateLeaders moves every partition's first replica to the end of its
// list, which moves no data, and elects the new first replica leader.
func (l *clusterLoad) rotateLeaders() {
	l.t.Helper()
	ctx := context.Background()
	before := l.latest().parts
	want := map[int][]int{}
	var ids []int
	for _, p := range before {
		want[p.ID] = append(slices.Clone(p.Replicas[1:]), p.Replicas[0])
		ids = append(ids, p.ID)
	}
	if err := l.c.Reassign(ctx, l.topic, want); err != nil {
		l.t.Fatal(err)
	}
	var why string
	// The reassignment completes at once (the replicas are the same), but
	// the nodes learn it from the metadata log a moment later; an
	// election before that is "not needed".
	testkit.Within(l.t, 30*time.Second, "the new replica order and leaders", func() bool {
		ps, err := l.c.Partitions(ctx, l.topic)
		if err != nil {
			why = err.Error()
			return false
		}
		for _, p := range ps {
			if !slices.Equal(p.Replicas, want[p.ID]) {
				why = fmt.Sprintf("partition %d has replicas %v, want %v", p.ID, p.Replicas, want[p.ID])
				return false
			}
		}
		if err := l.c.ElectPreferred(ctx, l.topic, ids); err != nil {
			why = err.Error()
			return false
		}
		for _, p := range ps {
			if p.Leader != want[p.ID][0] {
				why = fmt.Sprintf("partition %d is led by %d, want %d", p.ID, p.Leader, want[p.ID][0])
				return false
			}
		}
		return true
	}, func() string { return why })
}

// stallFreeze is how long the frozen-leader fault keeps its broker
// stopped: longer than the broker session timeout (9 s), so the controller
// moves the frozen node's leaderships while the other partitions are
// measured.
const stallFreeze = 15 * time.Second

// isolate leaves node id leading partitions 0 and 3 of the topic and no
// replica of the others, and returns the partitions it leads. With three
// replicas of every partition on three nodes and acks=all, a frozen node
// would hold back every partition (a follower too, until it leaves the
// in-sync replicas after replica.lag.time.max.ms): that is the cluster,
// not kubewire. The others keep two replicas, as min.insync.replicas asks.
func (l *clusterLoad) isolate(id int) []int {
	l.t.Helper()
	var rest []int
	for _, b := range l.c.Brokers {
		if b.ID != id {
			rest = append(rest, b.ID)
		}
	}
	own := []int{0, 3}
	want := map[int][]int{}
	for p := range 6 {
		if slices.Contains(own, p) {
			want[p] = []int{id, rest[p%2], rest[(p+1)%2]}
		} else {
			want[p] = []int{rest[p%2], rest[(p+1)%2]}
		}
	}
	ctx := context.Background()
	if err := l.c.Reassign(ctx, l.topic, want); err != nil {
		l.t.Fatal(err)
	}
	var why string
	testkit.Within(l.t, time.Minute, "the replicas moved off broker "+strconv.Itoa(id), func() bool {
		ps, err := l.c.Partitions(ctx, l.topic)
		if err != nil {
			why = err.Error()
			return false
		}
		for _, p := range ps {
			if !slices.Equal(p.Replicas, want[p.ID]) {
				why = fmt.Sprintf("partition %d has replicas %v, want %v", p.ID, p.Replicas, want[p.ID])
				return false
			}
		}
		if err := l.c.ElectPreferred(ctx, l.topic, []int{0, 1, 2, 3, 4, 5}); err != nil {
			why = err.Error()
			return false
		}
		for _, p := range ps {
			if p.Leader != want[p.ID][0] {
				why = fmt.Sprintf("partition %d is led by %d, want %d", p.ID, p.Leader, want[p.ID][0])
				return false
			}
		}
		return true
	}, func() string { return why })
	return own
}

// whileLeading returns when node id no longer leads one of partitions own,
// as the load's samples taken after since show, or when limit has passed
// since since; it says which.
func (l *clusterLoad) whileLeading(id int, own []int, since time.Time, limit time.Duration) string {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		<-tick.C
		if time.Since(since) >= limit {
			return "it still led its partitions"
		}
		l.tmu.Lock()
		var moved []int
		if n := len(l.samples); n > 0 && l.samples[n-1].at.After(since) {
			for _, p := range l.samples[n-1].parts {
				if slices.Contains(own, p.ID) && p.Leader != id {
					moved = append(moved, p.ID)
				}
			}
		}
		l.tmu.Unlock()
		if len(moved) > 0 {
			return fmt.Sprintf("until the controller moved the leadership of partitions %v", moved)
		}
	}
}

// writtenTo counts the changes the load has enqueued so far per partition
// of the topic (murmur2 of the key, as the sink places them).
func (l *clusterLoad) writtenTo() map[int]int64 {
	l.t.Helper()
	bal, err := kafka.NewBalancer(kafka.BalancerMurmur2)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[int]int64{}
	for key, rvs := range l.written {
		p := bal.Balance(kafkago.Message{Key: []byte(key)}, 0, 1, 2, 3, 4, 5)
		n[p] += int64(len(rvs))
	}
	return n
}

// endOffsets reads, from the brokers other than skip, the end offsets of
// partitions of the topic: what they acknowledged to every in-sync
// replica. A leader elected a moment ago answers OFFSET_NOT_AVAILABLE
// until its high watermark has caught up: asked again until it has.
func (l *clusterLoad) endOffsets(partitions []int, skip int) map[int]int64 {
	l.t.Helper()
	var addrs []string
	for _, b := range l.c.Live() {
		if b.ID != skip {
			addrs = append(addrs, b.Addr)
		}
	}
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(addrs...), Timeout: 10 * time.Second, Transport: tr}
	var reqs []kafkago.OffsetRequest
	for _, p := range partitions {
		reqs = append(reqs, kafkago.LastOffsetOf(p))
	}
	var out map[int]int64
	var why string
	testkit.Within(l.t, 10*time.Second, "the end offsets of "+l.topic, func() bool {
		res, err := cl.ListOffsets(context.Background(), &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{l.topic: reqs}})
		if err != nil {
			why = err.Error()
			return false
		}
		out = map[int]int64{}
		for _, po := range res.Topics[l.topic] {
			if po.Error != nil {
				why = fmt.Sprintf("partition %d: %v", po.Partition, po.Error)
				return false
			}
			out[po.Partition] = po.LastOffset
		}
		why = fmt.Sprintf("offsets of %d partitions, want %d: %v", len(out), len(partitions), out)
		return len(out) == len(partitions)
	}, func() string { return why })
	return out
}

// waitISRWithout waits until node id has left the in-sync replicas of some
// partition.
func (l *clusterLoad) waitISRWithout(id int) {
	l.t.Helper()
	start := time.Now()
	testkit.Within(l.t, time.Minute, "broker "+strconv.Itoa(id)+" to leave the in-sync replicas", func() bool {
		s := l.latest()
		if s.at.Before(start) {
			return false
		}
		for _, p := range s.parts {
			if slices.Contains(p.Replicas, id) && !slices.Contains(p.ISR, id) {
				return true
			}
		}
		return false
	})
	l.t.Logf("broker %d left the in-sync replicas %v after it was frozen", id, time.Since(start).Round(time.Millisecond))
}

// mustHaveMovedLeaders checks that some partition changed leader while
// records were in flight: with events queued in the dispatcher on both
// sides of the change, and records acknowledged before and after it. (Not
// "in the seconds before": after a SIGKILL, every shard of the dispatcher
// can wait on the dead leader's partitions for the whole broker session
// timeout before the controller moves leadership.)
func (l *clusterLoad) mustHaveMovedLeaders() {
	l.t.Helper()
	l.tmu.Lock()
	defer l.tmu.Unlock()
	moves := 0
	inFlight := 0
	for i := 1; i < len(l.samples); i++ {
		prev, cur := l.samples[i-1], l.samples[i]
		for j, p := range cur.parts {
			if j < len(prev.parts) && p.Leader != prev.parts[j].Leader && p.LeaderEpoch > prev.parts[j].LeaderEpoch {
				moves++
				if prev.queued > 0 && cur.queued > 0 && l.ackedBefore(prev.at) && l.ackedAfter(cur.at) {
					inFlight++
				}
			}
		}
	}
	l.t.Logf("%d leader changes seen, %d of them with records in flight", moves, inFlight)
	if inFlight == 0 {
		l.t.Fatalf("no partition changed leader while records were in flight (%d changes seen): the fault did not happen", moves)
	}
}

// mustHaveShrunkISR checks that some partition's in-sync replicas shrank
// while records were in flight.
func (l *clusterLoad) mustHaveShrunkISR() {
	l.t.Helper()
	l.tmu.Lock()
	defer l.tmu.Unlock()
	for _, s := range l.samples {
		for _, p := range s.parts {
			if len(p.ISR) < len(p.Replicas) && s.queued > 0 {
				return
			}
		}
	}
	l.t.Fatal("no partition's in-sync replicas shrank while records were in flight: the fault did not happen")
}

// ackedBefore and ackedAfter report whether records were acknowledged
// before, or after, at. l.tmu is held.
func (l *clusterLoad) ackedBefore(at time.Time) bool {
	return len(l.acks) > 0 && l.acks[0].Before(at)
}

func (l *clusterLoad) ackedAfter(at time.Time) bool {
	return len(l.acks) > 0 && l.acks[len(l.acks)-1].After(at)
}

// halt stops the churn and the watchers, once.
func (l *clusterLoad) halt() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	<-l.churned
	l.watched.Wait()
}

// stalls returns the longest time between two acknowledgements, and the
// longest that delivery stayed stalled once every partition was writable
// (resumeDelay).
func (l *clusterLoad) stalls() (longest, resume time.Duration) {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	for i := 1; i < len(l.acks); i++ {
		a, b := l.acks[i-1], l.acks[i]
		longest = max(longest, b.Sub(a))
		// From the later of the last ack and the last moment some
		// partition was seen unwritable, to the next ack.
		from := a
		for _, s := range l.samples {
			if !s.writable && s.at.After(from) && s.at.Before(b) {
				from = s.at
			}
		}
		resume = max(resume, b.Sub(from))
	}
	return longest, resume
}

// finish stops the load, lets the dispatcher deliver what it holds, reads
// the topic back and checks it, and records the fault's row.
func (l *clusterLoad) finish(fault string) {
	t := l.t
	t.Helper()
	l.halt()
	testkit.Within(t, 2*time.Minute, "the dispatcher to deliver its backlog", func() bool { return l.d.Queued() == 0 },
		func() string { return strconv.Itoa(l.d.Queued()) + " events queued" })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n := l.d.Close(ctx); n != 0 {
		t.Errorf("the dispatcher could not deliver %d events", n)
	}
	l.mu.Lock()
	written, changes := l.written, l.changes
	l.mu.Unlock()

	// The events, without the tombstones the sink writes after deletes:
	// those carry no id and no resourceVersion.
	var rs []rawRecord
	testkit.Within(t, time.Minute, "the topic to hold every change", func() bool {
		rs = slices.DeleteFunc(readTopic(ctx, t, l.c.Live()[0].Addr, l.topic), func(r rawRecord) bool { return r.value == nil })
		return len(rs) >= changes
	}, func() string { return fmt.Sprintf("%d events of %d changes", len(rs), changes) })

	ids := map[string]int{}
	got := map[string][]int{}
	var duplicates int
	for _, r := range rs {
		id := string(r.headers["ce_id"])
		if ids[id]++; ids[id] > 1 {
			duplicates++
		}
		rv, err := strconv.Atoi(string(r.headers["ce_resourceversion"]))
		if err != nil {
			t.Fatalf("record %s[%d]@%d has resourceversion %q", r.topic, r.partition, r.offset, r.headers["ce_resourceversion"])
		}
		got[string(r.key)] = append(got[string(r.key)], rv)
	}
	var missing, disorder int
	for key, want := range written {
		have := map[int]bool{}
		for _, rv := range got[key] {
			have[rv] = true
		}
		for _, rv := range want {
			if !have[rv] {
				if missing++; missing <= 10 {
					t.Errorf("key %s: resourceVersion %d was written and is not in the topic", key, rv)
				}
			}
		}
		if !slices.IsSorted(got[key]) {
			if disorder++; disorder <= 10 {
				t.Errorf("key %s: the topic holds resourceVersions out of order: %v", key, got[key])
			}
		}
	}
	longest, resume := l.stalls()
	seqErrors := l.seqErrors() - l.base.seqErrors
	resends := l.resends() - l.base.resends
	t.Logf("%s: %d changes in %v, %d records in the topic, %d duplicates, %d versions missing, %d keys out of order, "+
		"%v requests resent, %v sequence errors, longest stall %v, longest stall once writable %v, resident memory %d MiB",
		fault, changes, time.Since(l.start).Round(time.Second), len(rs), duplicates, missing, disorder,
		resends, seqErrors, longest.Round(time.Millisecond), resume.Round(time.Millisecond), l.c.RSS()>>20)
	recordClusterFault(fault, changes, len(rs), duplicates, missing, longest, resume)
	if duplicates != 0 {
		t.Errorf("the topic holds %d duplicate events", duplicates)
	}
	if seqErrors != 0 {
		t.Errorf("kubewire_kafka_producer_sequence_errors_total{sink=%q} grew by %v, want 0", l.name, seqErrors)
	}
	if resume > maxResume {
		t.Errorf("delivery stayed stalled %v after every partition was writable, want at most %v", resume, maxResume)
	}
}

// clusterFaults are the rows of the table printed after the cluster test
// (and copied into docs/reliability.md).
var clusterFaults struct {
	sync.Mutex
	rows [][7]string
}

func recordClusterFault(fault string, changes, events, duplicates, missing int, longest, resume time.Duration) {
	clusterFaults.Lock()
	defer clusterFaults.Unlock()
	clusterFaults.rows = append(clusterFaults.rows, [7]string{fault, strconv.Itoa(changes), strconv.Itoa(events),
		strconv.Itoa(duplicates), strconv.Itoa(missing), longest.Round(100 * time.Millisecond).String(),
		resume.Round(100 * time.Millisecond).String()})
}

// printClusterFaults logs the table and appends it to $KUBEWIRE_FAULT_TABLE,
// which CI shows even though go test hides the output of passing packages.
func printClusterFaults(t *testing.T) {
	clusterFaults.Lock()
	defer clusterFaults.Unlock()
	if len(clusterFaults.rows) == 0 {
		return
	}
	var b strings.Builder
	const row = "%-70s %8s %9s %10s %8s %8s %9s\n"
	fmt.Fprintf(&b, row, "KAFKA CLUSTER FAULT (3 nodes, RF 3, min.insync 2)", "CHANGES", "IN TOPIC", "DUPLICATES", "MISSING", "STALL", "RESUMED")
	for _, r := range clusterFaults.rows {
		fmt.Fprintf(&b, row, r[0], r[1], r[2], r[3], r[4], r[5], r[6])
	}
	t.Log("\n" + b.String())
	if path := os.Getenv("KUBEWIRE_FAULT_TABLE"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(b.String())
			f.Close()
		}
	}
}
