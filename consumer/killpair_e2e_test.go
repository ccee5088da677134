//go:build e2e

package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// This file checks, on a real Apache Kafka broker (the group coordinator,
// its session expiry and its rebalances are the broker's; kfake's group
// coordinator left a killed member's partition unassigned in our runs), the
// same guarantees as kill_test.go for a consumer group
// of two members whose partitions' states live in KafkaConfig.States: one
// member or the other is SIGKILLed at random moments and restarted, so that
// partitions go from one member to the other, taken over from their saved
// states. Across both members and all their runs, no delete is missed, no
// handler sees an event before the position its member started the
// partition at, and at the end the two Views together hold what was
// written, each key in one of them only.

// pairMember is one member's process, restarted after each kill.
type pairMember struct {
	name, state, log string
	cmd              *exec.Cmd
	exited           chan error
	// logFrom is the size of the log when the running process started:
	// what follows is its own.
	logFrom int
}

// assigned is the partitions of the running process's latest generation
// (its last "loaded" line), nil before its first.
func (m *pairMember) assigned() []string {
	b, _ := os.ReadFile(m.log)
	if len(b) < m.logFrom {
		return nil
	}
	var last consumer.Positions
	for _, l := range strings.Split(string(b[m.logFrom:]), "\n") {
		if rest, ok := strings.CutPrefix(l, "loaded "); ok {
			last = consumer.Positions{}
			_ = json.Unmarshal([]byte(rest), &last)
		}
	}
	var ps []string
	for p := range last {
		ps = append(ps, p)
	}
	return ps
}

func killedPair(t *testing.T, addr, topic string, end consumer.Positions, live []string, deletes map[string]bool, seed uint64, kills int) {
	dir := t.TempDir()
	states := filepath.Join(dir, "states")
	members := []*pairMember{
		{name: "a", state: filepath.Join(dir, "a.state"), log: filepath.Join(dir, "a.log")},
		{name: "b", state: filepath.Join(dir, "b.state"), log: filepath.Join(dir, "b.log")},
	}
	start := func(m *pairMember) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "KW_SOURCE=kafka-pair", "KW_ADDR="+addr, "KW_STREAM="+topic,
			"KW_STATE="+m.state, "KW_STATES="+states, "KW_LOG="+m.log, "KW_END={}")
		cmd.Stderr = os.Stderr
		b, _ := os.ReadFile(m.log)
		m.logFrom = len(b)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m.cmd, m.exited = cmd, make(chan error, 1)
		go func() { m.exited <- cmd.Wait() }()
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
			}
		})
	}
	lines := func() int {
		n := 0
		for _, m := range members {
			b, _ := os.ReadFile(m.log)
			n += bytes.Count(b, []byte("\n"))
		}
		return n
	}
	alive := func() {
		for _, m := range members {
			select {
			case err := <-m.exited:
				t.Fatalf("member %s exited before its kill: %v", m.name, err)
			default:
			}
		}
	}
	for _, m := range members {
		start(m)
	}
	r := rand.New(rand.NewPCG(seed, 0))
	killed := map[string]int{}
	for k := 0; k < kills; k++ {
		m := members[r.IntN(len(members))]
		from, after := lines(), r.IntN(300)
		testkit.Eventually(t, fmt.Sprintf("kill %d: %d more handler calls", k, after), func() bool {
			alive()
			return lines()-from > after
		})
		if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-m.exited
		killed[m.name]++
		start(m)
	}

	// Every partition's state saved at its end: the group read it all.
	store := consumer.DirStates(states)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, m := range members {
			b, _ := os.ReadFile(m.log)
			var marks []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "loaded") || strings.HasPrefix(l, "end") {
					marks = append(marks, l)
				}
			}
			t.Logf("member %s: %d log lines; generations:\n%s", m.name, strings.Count(string(b), "\n"), strings.Join(marks, "\n"))
		}
		filepath.WalkDir(states, func(p string, _ os.DirEntry, _ error) error { t.Logf("store: %s", p); return nil })
	})
	testkit.Eventually(t, "every partition's saved state at the topic's end", func() bool {
		alive()
		for p, o := range end {
			b, err := store.Load(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			line, _, _ := bytes.Cut(b, []byte("\n"))
			var h struct{ Positions consumer.Positions }
			if len(b) == 0 || json.Unmarshal(line, &h) != nil || h.Positions[p] < o {
				return false
			}
		}
		return true
	})
	// A member killed after the group had read everything leaves its
	// partitions unowned until its session expires or it rejoins, and a
	// restarted member writes its View only at SIGTERM: wait until the
	// running processes' generations cover every partition between them.
	var covered []string
	testkit.Within(t, time.Minute, "the members' current generations to cover every partition", func() bool {
		alive()
		covered = covered[:0]
		for _, m := range members {
			covered = append(covered, m.assigned()...)
		}
		sort.Strings(covered)
		var want []string
		for p := range end {
			want = append(want, p)
		}
		sort.Strings(want)
		return strings.Join(covered, " ") == strings.Join(want, " ")
	}, func() string { return fmt.Sprint("covered: ", covered) })
	for _, m := range members {
		if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-m.exited:
			if err != nil {
				t.Fatalf("member %s on SIGTERM: %v", m.name, err)
			}
		case <-time.After(testkit.Timeout):
			t.Fatalf("member %s did not stop on SIGTERM in %v", m.name, testkit.Timeout)
		}
	}

	seen := map[string]bool{}
	var held []string
	owner := map[string]string{}
	for _, m := range members {
		gens, calls, again, ds := readKillLog(t, m.log)
		for d := range ds {
			seen[d] = true
		}
		v := consumer.NewView(consumer.Options{})
		if err := v.LoadStateFile(m.state); err != nil {
			t.Fatal(err)
		}
		got := viewHolds(t, v)
		for _, o := range got {
			if other, ok := owner[o]; ok {
				t.Errorf("both members' Views hold %s (%s and %s)", o, other, m.name)
			}
			owner[o] = m.name
		}
		held = append(held, got...)
		t.Logf("member %s: killed %d times, %d generations, %d handler calls, %d handled again (uncommitted tails, allowed), holds %d objects at the end",
			m.name, killed[m.name], gens, calls, again, len(got))
	}
	missed := 0
	for d := range deletes {
		if !seen[d] {
			if missed++; missed <= 5 {
				t.Errorf("the delete %s never reached OnDelete", d)
			}
		}
	}
	sort.Strings(held)
	if want := withUIDs(live); strings.Join(held, " ") != strings.Join(want, " ") {
		t.Errorf("the two Views hold %d objects together, want %d:\ngot  %v\nwant %v", len(held), len(want), held, want)
	}
	t.Logf("seed %d: %d kills, %d deletes written, %d missed", seed, kills, len(deletes), missed)
}

// On a real Apache Kafka broker: the group coordinator, its session expiry
// and its rebalances are the broker's, not kfake's.
func TestE2EAKafkaGroupOfTwoWithMembersKilledAtRandomHandsPartitionStatesOver(t *testing.T) {
	kb := kafkatest.Start(t, nil)
	// The sink creates its topic at its first write, and a partition the
	// broker has just created may have no leader yet: create it here and
	// write once every partition answers from its leader.
	s, topic := kafkaSink(t, kb.Addr, config.ContentModeBinary)
	conn, err := kafkago.Dial("tcp", kb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.CreateTopics(kafkago.TopicConfig{Topic: topic, NumPartitions: 3, ReplicationFactor: 1})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	topicEnds(t, kb.Addr, topic, 3)
	batches, live, deletes := killHistory(rand.New(rand.NewPCG(killSeed, 4)), 3000)
	write(t, s, batches)
	killedPair(t, kb.Addr, topic, topicEnds(t, kb.Addr, topic, 3), live, deletes, killSeed, 6)
}
