package kafka

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// idlePartition is a partition with no loop running, lingering up to a
// minute for a request of up to maxMessages records: the tests call next
// themselves.
func idlePartition(maxMessages int) *partition {
	s := &Sink{cfg: Config{Batch: &Batch{MaxMessages: maxMessages, MaxBytes: 1 << 20, Linger: config.NewDuration(time.Minute)}}}
	s.life, s.stop = context.WithCancel(context.Background())
	return &partition{s: s, wake: make(chan struct{}, 1)}
}

func oneRecord(name string) *unit { return newUnit([]record{{key: []byte(name), object: name}}) }

// nextAsync runs p.next in a goroutine; the batch arrives on the channel.
func nextAsync(t *testing.T, p *partition) <-chan []*unit {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got := make(chan []*unit, 1)
	go func() { got <- p.next(ctx) }()
	return got
}

func queued(p *partition) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

func names(us []*unit) string {
	s := ""
	for i, u := range us {
		if i > 0 {
			s += ","
		}
		s += string(u.records[0].key)
	}
	return s
}

func TestALoneUnitIsSentWithoutWaitingForTheLinger(t *testing.T) {
	p := idlePartition(100)
	p.submit(oneRecord("lone"))
	select {
	case got := <-nextAsync(t, p):
		if names(got) != "lone" {
			t.Fatalf("next took %s, want lone", names(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a unit that arrived alone was held for the linger (1m)")
	}
}

func TestUnitsThatArriveTogetherLingerForMore(t *testing.T) {
	p := idlePartition(3)
	p.submit(oneRecord("a"))
	p.submit(oneRecord("b")) // right behind a: dense
	got := nextAsync(t, p)
	// Once next has taken a and b, it either returned them (no linger) or
	// waits for more; c then fills its request.
	testkit.Within(t, 10*time.Second, "next to take the queued units", func() bool { return queued(p) == 0 })
	p.submit(oneRecord("c"))
	select {
	case us := <-got:
		if names(us) != "a,b,c" {
			t.Fatalf("next took %s, want a,b,c in one request: units that arrive together should linger for more", names(us))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a full request was not sent within 10s")
	}
}

func TestWithoutALingerEveryUnitGoesAtOnce(t *testing.T) {
	p := idlePartition(100)
	p.s.cfg.Batch.Linger = config.NewDuration(0)
	for i := range 3 {
		p.submit(oneRecord(strconv.Itoa(i)))
	}
	select {
	case got := <-nextAsync(t, p):
		if names(got) != "0,1,2" {
			t.Fatalf("next took %s, want 0,1,2", names(got))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("with linger 0, next waited")
	}
}
