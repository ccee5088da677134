package consumer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	kafkago "github.com/segmentio/kafka-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// This file checks issue 29's "the consumer's own kills": a consumer
// process that keeps its View's state in a file (saved before each ack or
// commit) is SIGKILLed at random moments while it reads, and restarted
// from its state file each time. Across all its runs:
//   - no delete is missed: each delete written reaches OnDelete in some run,
//     and no run reports a delete of a key it does not hold;
//   - no handler is called again for an event acknowledged before a kill:
//     a run's handlers see only events at or past the state it loaded;
//   - the last run's View equals what was written.
//
// The consumer runs as a child process (this test binary, re-executed), so
// that the kill is a real SIGKILL with no deferred code run.

const childEnv = "KUBEWIRE_CONSUMER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain is the consumer process. Its settings come from the
// environment; each handler call is one line of its log, written at once
// (unbuffered, so a SIGKILL keeps it): "<offset> <kind> <key> <rv>".
func childMain() int {
	env := os.Getenv
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	logf, err := os.OpenFile(env("KW_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fail(err)
	}
	var reading consumer.Position
	line := func(kind string, obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if d, isD := obj.(cache.DeletedFinalStateUnknown); isD {
			u, ok = d.Obj.(*unstructured.Unstructured)
		}
		if !ok {
			return
		}
		fmt.Fprintf(logf, "%s/%d %s %s %s\n", reading.Partition, reading.Offset, kind, u.GetName(), u.GetResourceVersion())
	}
	v := consumer.NewView(consumer.Options{
		OnRead: func(r consumer.Read) { reading = r.Position },
		OnDeleteNotHeld: func(p consumer.Problem) {
			fmt.Fprintf(logf, "%s/%d notheld %s -\n", p.Position.Partition, p.Position.Offset, p.Key)
		},
	})
	state := env("KW_STATE")
	if err := v.LoadStateFile(state); err != nil {
		return fail(err)
	}
	loaded, _ := json.Marshal(v.Position())
	fmt.Fprintf(logf, "loaded %s\n", loaded)
	v.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if initial && reading.Partition == "" {
				return // a loaded object, not an event
			}
			if initial && env("KW_SOURCE") == "kafka-pair" {
				// A partition's object taken over, or an event
				// read before the first catch-up. Either way its
				// line carries the position read last, which the
				// positions loaded hold to as any other line's:
				// a generation's take-overs come before its
				// "loaded" line.
				line("listed", obj)
				return
			}
			line("add", obj)
		},
		UpdateFunc: func(_, obj any) { line("update", obj) },
		DeleteFunc: func(obj any) { line("delete", obj) },
	})
	save := func(context.Context) error { return v.SaveStateFile(state) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var run func(context.Context) error
	switch env("KW_SOURCE") {
	case "jetstream":
		nc, err := natsgo.Connect(env("KW_ADDR"))
		if err != nil {
			return fail(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return fail(err)
		}
		src, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{
			JetStream: js, Stream: env("KW_STREAM"), Durable: "killed", BeforeAck: save, AckInterval: 50 * time.Millisecond,
		})
		if err != nil {
			return fail(err)
		}
		run = src.Run
	case "kafka":
		src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{
			Brokers: []string{env("KW_ADDR")}, Topic: env("KW_STREAM"), GroupID: "killed",
			BeforeCommit: save, CommitInterval: 50 * time.Millisecond, MaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second,
		})
		if err != nil {
			return fail(err)
		}
		run = src.Run
	case "kafka-pair":
		// A member of a group of two whose partitions' states live in
		// a directory both members share. It runs until SIGTERM, and
		// logs each generation's assignment as a "loaded" line: the
		// positions it starts its partitions at.
		src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{
			Brokers: []string{env("KW_ADDR")}, Topic: env("KW_STREAM"), GroupID: "pair",
			States: consumer.DirStates(env("KW_STATES")), CommitInterval: 50 * time.Millisecond, MaxWait: 100 * time.Millisecond,
			SessionTimeout: 6 * time.Second,
			OnRebalance: func(rb consumer.Rebalance) {
				b, _ := json.Marshal(rb.Assigned)
				fmt.Fprintf(logf, "loaded %s\n", b)
			},
		})
		if err != nil {
			return fail(err)
		}
		run = src.Run
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- run(ctx) }()
		select {
		case err := <-done:
			return fail(fmt.Errorf("source stopped: %w", err))
		case <-term:
		}
		cancel()
		<-done
		if err := v.SaveStateFile(state); err != nil {
			return fail(err)
		}
		fmt.Fprintln(logf, "end")
		return 0
	default:
		return fail(fmt.Errorf("source %q", env("KW_SOURCE")))
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	// The last run reads to the end the parent gives, then saves its
	// state and stops; the others run until they are killed.
	var end consumer.Positions
	if err := json.Unmarshal([]byte(env("KW_END")), &end); err != nil {
		return fail(err)
	}
	for {
		select {
		case err := <-done:
			return fail(fmt.Errorf("source stopped: %w", err))
		case <-time.After(20 * time.Millisecond):
		}
		pos, reached := v.Position(), len(end) > 0
		for p, o := range end {
			if pos[p] < o {
				reached = false
			}
		}
		if reached {
			cancel()
			<-done
			if err := v.SaveStateFile(state); err != nil {
				return fail(err)
			}
			fmt.Fprintln(logf, "end")
			return 0
		}
	}
}

// killHistory is a history of ConfigMap-like objects: adds, updates and
// deletes of a few dozen keys, with a snapshot window now and then, as
// kubewire would write it. It returns the batches and what is live at the
// end ("name@rv"), and the deletes written ("name@rv").
func killHistory(r *rand.Rand, ops int) (batches [][]*informer.Change, live []string, deletes map[string]bool) {
	const ns = "kill"
	rv := 0
	held := map[string]int{}
	deletes = map[string]bool{}
	var batch []*informer.Change
	flush := func() {
		if len(batch) > 0 {
			batches = append(batches, batch)
			batch = nil
		}
	}
	for i := 0; i < ops; i++ {
		name := fmt.Sprintf("k%02d", r.IntN(40))
		rv++
		switch _, ok := held[name]; {
		case !ok:
			batch = append(batch, sinktest.Change(informer.OpAdded, ns, name, rv))
			held[name] = rv
		case r.IntN(4) == 0:
			batch = append(batch, sinktest.Change(informer.OpDeleted, ns, name, rv))
			delete(held, name)
			deletes[name+"@"+strconv.Itoa(rv)] = true
		default:
			batch = append(batch, sinktest.Change(informer.OpUpdated, ns, name, rv))
			held[name] = rv
		}
		if len(batch) == 10 {
			flush()
		}
		if i%500 == 499 {
			flush()
			sid := fmt.Sprintf("kill-%d", i)
			marker := func(op informer.Op, count int) []*informer.Change {
				return []*informer.Change{{Op: op, Resource: sinktest.Resource, Key: sinktest.Resource.KeyPrefix, SnapshotID: sid, Count: count, Observed: time.Now()}}
			}
			batches = append(batches, marker(informer.OpSnapshotStarted, 0))
			names := make([]string, 0, len(held))
			for n := range held {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				ch := sinktest.Change(informer.OpSynced, ns, n, held[n])
				ch.SnapshotID = sid
				batch = append(batch, ch)
			}
			flush()
			batches = append(batches, marker(informer.OpSnapshotCompleted, len(names)))
		}
	}
	flush()
	for n, v := range held {
		live = append(live, n+"@"+strconv.Itoa(v))
	}
	sort.Strings(live)
	return batches, live, deletes
}

// killedConsumer runs the consumer child cycles times, killing all but the
// last at a random moment, and checks the guarantees above.
func killedConsumer(t *testing.T, source, addr, stream string, end consumer.Positions, live []string, deletes map[string]bool, seed uint64, cycles int) {
	dir := t.TempDir()
	state, logPath := filepath.Join(dir, "view.state"), filepath.Join(dir, "handlers.log")
	endJSON, _ := json.Marshal(end)
	r := rand.New(rand.NewPCG(seed, 0))
	lines := func() int {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "\n")
	}
	for c := 0; c < cycles; c++ {
		last := c == cycles-1
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "KW_SOURCE="+source, "KW_ADDR="+addr, "KW_STREAM="+stream,
			"KW_STATE="+state, "KW_LOG="+logPath, "KW_END="+string(endJSON))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			// A run the test gave up on must not outlive it.
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
			}
		})
		if last {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("the last run: %v", err)
				}
			case <-time.After(2 * testkit.Timeout):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("the last run did not read to the end in %v", 2*testkit.Timeout)
			}
			break
		}
		// Kill after a random number of handler calls: anywhere in an
		// ack batch, or before the first.
		from, after := lines(), r.IntN(300)
		testkit.Eventually(t, fmt.Sprintf("run %d to handle %d events", c, after), func() bool {
			select {
			case err := <-exited:
				t.Fatalf("run %d exited before its kill: %v", c, err)
			default:
			}
			return lines()-from > after
		})
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exited
	}

	run, calls, again, seenDeletes := readKillLog(t, logPath)
	missed := 0
	for d := range deletes {
		if !seenDeletes[d] {
			missed++
			if missed <= 5 {
				t.Errorf("the delete %s never reached OnDelete", d)
			}
		}
	}
	final := consumer.NewView(consumer.Options{})
	if err := final.LoadStateFile(state); err != nil {
		t.Fatal(err)
	}
	if got := viewHolds(t, final); strings.Join(got, " ") != strings.Join(withUIDs(live), " ") {
		t.Errorf("the last run's View holds %d objects, want %d:\ngot  %v\nwant %v", len(got), len(live), got, withUIDs(live))
	}
	t.Logf("seed %d, %s: %d runs (%d killed), %d handler calls, %d deletes (%d missed), %d events handled again after a kill (the unacknowledged tail, allowed)",
		seed, source, run, cycles-1, calls, len(deletes), missed, again)
}

// readKillLog reads a consumer child's handler log back and checks it:
// no handler sees an event before the positions loaded last ("loaded"
// lines: a state loaded at start, or a group's assignment), and no delete
// is of a key the View did not hold. It returns how many "loaded" lines,
// handler calls and calls seen twice there were, and the deletes seen.
func readKillLog(t *testing.T, logPath string) (loads, calls, again int, seenDeletes map[string]bool) {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var loaded consumer.Positions
	run := -1
	seenDeletes = map[string]bool{}
	handled := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch fs[0] {
		case "loaded":
			run++
			loaded = consumer.Positions{}
			if err := json.Unmarshal([]byte(fs[1]), &loaded); err != nil {
				t.Fatal(err)
			}
			continue
		case "end":
			continue
		}
		calls++
		partition, off := fs[0], ""
		if i := strings.LastIndexByte(fs[0], '/'); i >= 0 {
			partition, off = fs[0][:i], fs[0][i+1:]
		}
		offset, _ := strconv.ParseInt(off, 10, 64)
		if o, ok := loaded[partition]; ok && offset < o {
			t.Errorf("%s, run %d: a handler saw %s at %s, before the position it loaded (%s at %d): committed before, and handled again", filepath.Base(logPath), run, fs[1], fs[0], partition, o)
		}
		if fs[1] == "notheld" {
			t.Errorf("%s, run %d: a delete of %s, which the View did not hold, at %s", filepath.Base(logPath), run, fs[2], fs[0])
		}
		if fs[1] == "delete" {
			seenDeletes[fs[2]+"@"+fs[3]] = true
		}
		if fs[1] == "listed" {
			// Objects taken over come with the position last read, one
			// line each: not repeats.
			continue
		}
		if handled[fs[0]+" "+fs[1]]++; handled[fs[0]+" "+fs[1]] == 2 {
			again++
		}
	}
	return run + 1, calls, again, seenDeletes
}

// withUIDs turns "name@rv" into viewHolds's "name@rv#uid".
func withUIDs(live []string) []string {
	out := make([]string, len(live))
	for i, l := range live {
		out[i] = l + "#uid-kill-" + l[:strings.IndexByte(l, '@')]
	}
	return out
}

const killSeed = 2929

func TestAJetStreamDurableConsumerKilledAtRandomMissesNoDeleteAndRepeatsNothingItAcked(t *testing.T) {
	url, js := startNATS(t)
	s := natsSink(t, url, config.ContentModeBinary, "KILL")
	batches, live, deletes := killHistory(rand.New(rand.NewPCG(killSeed, 1)), 3000)
	write(t, s, batches)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KILL")
	if err != nil {
		t.Fatal(err)
	}
	end := consumer.Positions{"KILL": int64(st.CachedInfo().State.LastSeq) + 1}
	killedConsumer(t, "jetstream", url, "KILL", end, live, deletes, killSeed, 8)
}

func TestAKafkaGroupMemberKilledAtRandomMissesNoDeleteAndRepeatsNothingItCommitted(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	batches, live, deletes := killHistory(rand.New(rand.NewPCG(killSeed, 2)), 3000)
	write(t, s, batches)
	end := consumer.Positions{}
	for p := 0; p < 3; p++ {
		conn, err := kafkago.DialLeader(context.Background(), "tcp", addr, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		end[consumer.KafkaPartition(topic, p)] = last
	}
	// Fewer cycles than JetStream: after each kill, the group waits out the
	// dead member's session (6s, the broker's minimum) before it hands its
	// partitions to the next run.
	killedConsumer(t, "kafka", addr, topic, end, live, deletes, killSeed, 5)
}
