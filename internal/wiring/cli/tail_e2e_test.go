//go:build e2e

package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// kfake cannot restart, so tail across a Kafka broker restart runs on
// Apache Kafka: a write made after the broker is back shows within seconds.
func TestE2ETailShowsNewEventsWithinSecondsOfAKafkaBrokerRestart(t *testing.T) {
	kb := kafkatest.Start(t, nil)
	path := write(t, fmt.Sprintf(tailConfig, kb.Addr, "nats://127.0.0.1:1"))
	send := sinkOf(t, path, "events")
	// A topic the sink has just created may have no leader yet (Not Leader
	// For Partition): retry, as the dispatcher does.
	var err error
	testkit.Within(t, time.Minute, "the first write", func() bool {
		err = send(sinktest.Change(informer.OpAdded, "team-a", "before", 1))
		return err == nil
	}, func() string { return fmt.Sprint(err) })

	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main([]string{"tail", "--config", path, "--sink", "events", "--count", "1", "--name", "after"}, &out, &errOut)
	}()
	testkit.Eventually(t, "tail to follow", func() bool { return strings.Contains(errOut.String(), "following") })

	kb.Restart(t)
	var sent time.Time
	testkit.Within(t, 2*time.Minute, "a write after the restart", func() bool {
		if send(sinktest.Change(informer.OpAdded, "team-a", "after", 2)) != nil {
			return false
		}
		sent = time.Now()
		return true
	})
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		// Kafka's client backs off a few seconds between reconnects; a
		// loaded CI machine adds to it.
		if took := time.Since(sent); took > 10*time.Second {
			t.Errorf("the event written after the restart showed %s later, want a few seconds", took.Round(time.Millisecond))
		} else {
			t.Logf("the event written after the restart showed %s later", took.Round(time.Millisecond))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("tail did not show the event written after the restart within 60s\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
}
