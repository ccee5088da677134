package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	meta "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// Cluster is n Kafka nodes in KRaft mode, each both broker and controller,
// with a static controller quorum of all of them. Its defaults are what a
// production cluster that must not lose acknowledged records uses:
// replication factor 3, min.insync.replicas 2, no unclean leader election.
// Automatic leader rebalancing is off, so that leadership moves only when a
// test moves it.
type Cluster struct {
	// Brokers are the nodes; Brokers[i] has node.id i+1.
	Brokers []*Broker
	// Startup is how long the nodes took from launch until every one of
	// them was a registered broker.
	Startup time.Duration
}

// clusterJVM keeps each node small enough that three of them, the tests and
// the race detector share two cores: a small heap, the serial collector,
// the JIT's quick tier only, and one core as far as the JVM's thread pools
// are concerned.
var clusterJVM = []string{"-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1",
	"-XX:TieredStopAtLevel=1"}

// StartCluster formats and starts an n-node cluster, failing t if it is not
// ready within a minute. props are added to (and override) every node's
// server properties. The nodes are killed when t ends.
func StartCluster(t testing.TB, n int, props map[string]string) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatalf("kafkatest: java is required: %v", err)
	}
	libs, err := Libs()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	ports := make([]int, n)
	cports := make([]int, n)
	var voters []string
	free := testkit.FreePorts(t, 2*n)
	for i := range n {
		ports[i], cports[i] = free[2*i], free[2*i+1]
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, cports[i]))
	}
	rf := strconv.Itoa(min(n, 3))
	isr := strconv.Itoa(max(1, min(n, 3)-1))
	for i := range n {
		dir := t.TempDir()
		b := &Broker{
			Addr:  "127.0.0.1:" + strconv.Itoa(ports[i]),
			Libs:  libs,
			ID:    i + 1,
			t:     t,
			dir:   dir,
			props: filepath.Join(dir, "server.properties"),
			logf:  filepath.Join(dir, "broker.log"),
			jvm:   clusterJVM,
		}
		p := map[string]string{
			"process.roles": "broker,controller",
			"node.id":       strconv.Itoa(i + 1),
			// A static quorum: every node knows every voter from its
			// properties, and the storage needs no directory ids.
			"controller.quorum.voters":                 strings.Join(voters, ","),
			"listeners":                                "PLAINTEXT://" + b.Addr + ",CONTROLLER://127.0.0.1:" + strconv.Itoa(cports[i]),
			"advertised.listeners":                     "PLAINTEXT://" + b.Addr,
			"controller.listener.names":                "CONTROLLER",
			"inter.broker.listener.name":               "PLAINTEXT",
			"listener.security.protocol.map":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"log.dirs":                                 filepath.Join(dir, "data"),
			"num.partitions":                           "1",
			"default.replication.factor":               rf,
			"min.insync.replicas":                      isr,
			"offsets.topic.replication.factor":         rf,
			"transaction.state.log.replication.factor": rf,
			"transaction.state.log.min.isr":            isr,
			"unclean.leader.election.enable":           "false",
			"replica.lag.time.max.ms":                  "10000",
			"auto.leader.rebalance.enable":             "false",
			"controlled.shutdown.enable":               "true",
			"group.initial.rebalance.delay.ms":         "0",
			"auto.create.topics.enable":                "false",
			// Fewer threads than the defaults (3 network, 8 I/O, 10
			// background): three nodes share two cores.
			"num.network.threads": "2",
			"num.io.threads":      "2",
			"background.threads":  "2",
		}
		for k, v := range props {
			p[k] = v
		}
		var buf bytes.Buffer
		for k, v := range p {
			fmt.Fprintf(&buf, "%s=%s\n", k, escapeProperty(v))
		}
		if err := os.WriteFile(b.props, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Brokers = append(c.Brokers, b)
	}
	// The formats are independent; run them together, they each start a JVM.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, b := range c.Brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			format := exec.Command("java", "-XX:TieredStopAtLevel=1", "-cp", filepath.Join(libs, "*"), "kafka.tools.StorageTool",
				"format", "-t", clusterID, "-c", b.props)
			if out, err := format.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("kafkatest: format storage of node %d: %v\n%s", b.ID, err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, b := range c.Brokers {
		t.Cleanup(b.Kill)
		if err := b.launch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range c.Brokers {
		if err := b.waitReady(); err != nil {
			t.Fatal(err)
		}
	}
	c.Startup = time.Since(start)
	return c
}

// Addrs are the PLAINTEXT addresses of every node, running or not.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, b.Addr)
	}
	return out
}

// Broker returns the node with the given node.id.
func (c *Cluster) Broker(id int) *Broker { return c.Brokers[id-1] }

// Live returns the nodes that are running and not paused.
func (c *Cluster) Live() []*Broker {
	var out []*Broker
	for _, b := range c.Brokers {
		if b.Live() {
			out = append(out, b)
		}
	}
	return out
}

// RSS is the resident memory of all running nodes together, in bytes.
func (c *Cluster) RSS() int64 {
	var n int64
	for _, b := range c.Brokers {
		n += b.RSS()
	}
	return n
}

// Partition is what the cluster's metadata says of one partition.
type Partition struct {
	ID          int
	Leader      int // -1 when it has none
	LeaderEpoch int32
	// Replicas are in the order of preference: the first is the
	// preferred leader.
	Replicas []int
	// ISR are the in-sync replicas, sorted.
	ISR []int
}

// Partitions reads the partitions of topic from the metadata of the first
// live node that answers within two seconds, sorted by id. It asks each
// node on a transport of its own: kafka-go's Transport answers Metadata from
// a cache it refreshes only now and then, and the leader epoch is in
// kafka-go's protocol response only.
func (c *Cluster) Partitions(ctx context.Context, topic string) ([]Partition, error) {
	var errs []error
	for _, b := range c.Live() {
		ps, err := partitions(ctx, b.Addr, topic)
		if err == nil {
			return ps, nil
		}
		errs = append(errs, fmt.Errorf("node %d: %w", b.ID, err))
	}
	if len(errs) == 0 {
		return nil, errors.New("kafkatest: no live node")
	}
	return nil, errors.Join(errs...)
}

func partitions(ctx context.Context, addr, topic string) ([]Partition, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tr := &kafkago.Transport{DialTimeout: time.Second}
	defer tr.CloseIdleConnections()
	m, err := tr.RoundTrip(ctx, kafkago.TCP(addr), &meta.Request{TopicNames: []string{topic}})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*meta.Response)
	if !ok {
		return nil, fmt.Errorf("unexpected metadata response %T", m)
	}
	for _, tp := range res.Topics {
		if tp.Name != topic {
			continue
		}
		if tp.ErrorCode != 0 {
			return nil, kafkago.Error(tp.ErrorCode)
		}
		var out []Partition
		for _, p := range tp.Partitions {
			out = append(out, Partition{
				ID:          int(p.PartitionIndex),
				Leader:      int(p.LeaderID),
				LeaderEpoch: p.LeaderEpoch,
				Replicas:    ints(p.ReplicaNodes),
				ISR:         slices.Sorted(slices.Values(ints(p.IsrNodes))),
			})
		}
		slices.SortFunc(out, func(a, b Partition) int { return a.ID - b.ID })
		return out, nil
	}
	return nil, kafkago.UnknownTopicOrPartition
}

func ints(xs []int32) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// client is a kafka-go client for admin requests, bootstrapped from the
// live nodes.
func (c *Cluster) client() (*kafkago.Client, func()) {
	var addrs []string
	for _, b := range c.Live() {
		addrs = append(addrs, b.Addr)
	}
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	return &kafkago.Client{Addr: kafkago.TCP(addrs...), Timeout: 20 * time.Second, Transport: tr}, tr.CloseIdleConnections
}

// Reassign sets the replicas of partitions of topic, in the order of
// preference: the first replica is the preferred leader. A new order of the
// same replicas moves no data.
func (c *Cluster) Reassign(ctx context.Context, topic string, replicas map[int][]int) error {
	cl, done := c.client()
	defer done()
	req := &kafkago.AlterPartitionReassignmentsRequest{Topic: topic, Timeout: 20 * time.Second}
	for id, rs := range replicas {
		req.Assignments = append(req.Assignments, kafkago.AlterPartitionReassignmentsRequestAssignment{PartitionID: id, BrokerIDs: rs})
	}
	res, err := cl.AlterPartitionReassignments(ctx, req)
	if err != nil {
		return fmt.Errorf("kafkatest: reassign %s: %w", topic, err)
	}
	errs := []error{res.Error}
	for _, p := range res.PartitionResults {
		if p.Error != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", p.PartitionID, p.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafkatest: reassign %s: %w", topic, err)
	}
	return nil
}

// ElectPreferred makes the preferred (first) replica of each of the
// partitions of topic its leader, where it is not already.
func (c *Cluster) ElectPreferred(ctx context.Context, topic string, partitions []int) error {
	cl, done := c.client()
	defer done()
	res, err := cl.ElectLeaders(ctx, &kafkago.ElectLeadersRequest{Topic: topic, Partitions: partitions, Timeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("kafkatest: elect leaders of %s: %w", topic, err)
	}
	errs := []error{res.Error}
	for _, p := range res.PartitionResults {
		// ELECTION_NOT_NEEDED: the preferred replica leads already.
		if p.Error != nil && !errors.Is(p.Error, kafkago.ElectionNotNeeded) {
			errs = append(errs, fmt.Errorf("partition %d: %w", p.Partition, p.Error))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafkatest: elect leaders of %s: %w", topic, err)
	}
	return nil
}

// WaitInSync waits until every partition of each topic has a leader and
// all its replicas in sync, and fails t if that takes longer than timeout.
func (c *Cluster) WaitInSync(t testing.TB, timeout time.Duration, topics ...string) {
	t.Helper()
	var why string
	testkit.Within(t, timeout, "every replica of "+strings.Join(topics, ", ")+" in sync", func() bool {
		for _, topic := range topics {
			ps, err := c.Partitions(context.Background(), topic)
			if err != nil {
				why = err.Error()
				return false
			}
			for _, p := range ps {
				if p.Leader < 0 || !slices.Equal(p.ISR, slices.Sorted(slices.Values(p.Replicas))) {
					why = fmt.Sprintf("%s[%d]: leader %d, replicas %v, in sync %v", topic, p.ID, p.Leader, p.Replicas, p.ISR)
					return false
				}
			}
		}
		return true
	}, func() string { return why })
}
