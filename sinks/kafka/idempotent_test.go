package kafka_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The broker holds a produce request until long after kubewire gave up on
// it, as a broker does that restarts under load. kubewire retries the change
// (the same events, as the dispatcher does) and sends a newer one; then the
// held request is processed. An idempotent producer resent the held batch
// unchanged, so the broker takes the late copy for the duplicate it is;
// without idempotence it lands after the newer change. The second case
// shows the test can tell the two apart.
func TestALateCopyOfARequestKubewireGaveUpOnNeverLandsAfterNewerChanges(t *testing.T) {
	cases := []struct {
		name       string
		idempotent bool
		want       string
	}{
		{"An idempotent producer's stale request is a duplicate the broker drops.", true, "warm-up,a/2,a/3,after"},
		{"Without idempotence the stale request lands out of order.", false, "warm-up,a/2,a/3,a/2,after"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startFake(t)
			s, prefix := newSink(t, f.addr(), 1, func(k *kafka.Config) {
				k.Batch = &kafka.Batch{Linger: config.NewDuration(0)}
				k.RequestTimeout = config.NewDuration(time.Second)
				k.Idempotent = &c.idempotent
			})
			connect(t, s)
			write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic

			held := make(chan struct{})
			release := make(chan struct{})
			resumed := make(chan struct{})
			var first atomic.Bool
			f.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				// While the first request sleeps, later ones come here too.
				if !first.CompareAndSwap(false, true) {
					return nil, nil, false
				}
				f.c.DropControl()
				close(held)
				f.c.SleepControl(func() { <-release })
				close(resumed)
				return nil, nil, false // now let the broker process it
			})
			a2 := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
			if err := s.Write(context.Background(), a2); err == nil {
				t.Fatal("a Write whose request the broker held past the request timeout reported success")
			}
			<-held
			// What the dispatcher does next: the same Write again, then newer ones.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Write(ctx, a2); err != nil {
				t.Fatalf("the retry failed: %v", err)
			}
			write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "a", 3))
			close(release)
			<-resumed
			// The broker handles requests one at a time, so this one is
			// appended, if at all, after the held one.
			write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "after", 4))

			var got []string
			for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
				got = append(got, ev.Extensions()[encoding.ExtName].(string)+"/"+ev.Extensions()[encoding.ExtResourceVersion].(string))
			}
			if strings.Join(got, ",") != strings.ReplaceAll(strings.ReplaceAll(c.want, "warm-up", "warm-up/1"), "after", "after/4") {
				t.Errorf("the partition holds %s, want %s", strings.Join(got, ","), c.want)
			}
		})
	}
}

// The broker appends a request but kubewire never hears back (here: the
// answer comes after the request timeout). The Write reports what went out
// before the lost request as acknowledged, and the dispatcher writes again
// only the event of the lost request; that request goes out again
// unchanged, so the broker recognises it as a duplicate: each event is in
// the partition once. Without idempotence the repeat directly follows its
// first copy (no request held two events of one object): a/3 a/3, never
// a/2 a/3 a/2 a/3.
func TestARetryAfterALostAnswerLeavesEachEventOnceAndARepeatNextToItsFirstCopy(t *testing.T) {
	for _, c := range []struct {
		name       string
		idempotent bool
		want       []string
	}{
		{"An idempotent producer's resend is deduplicated by the broker.", true, []string{"warm-up/1,a/2,a/3"}},
		{"Without idempotence a/3 is at most repeated next to itself.", false, []string{"warm-up/1,a/2,a/3,a/3", "warm-up/1,a/2,a/3"}},
	} {
		t.Run(c.name, func(t *testing.T) { retryAfterALostAnswer(t, c.idempotent, c.want) })
	}
}

func retryAfterALostAnswer(t *testing.T, idempotent bool, want []string) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 1, func(k *kafka.Config) {
		k.Batch = &kafka.Batch{Linger: config.NewDuration(0)}
		k.RequestTimeout = config.NewDuration(time.Second)
		k.Idempotent = &idempotent
	})
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic

	// Hold the second produce request of the next Write until its Write
	// has given up on it, then let the broker append it.
	var seen atomic.Int32
	held := make(chan struct{})
	release := make(chan struct{})
	resumed := make(chan struct{})
	f.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if seen.Add(1) != 2 {
			return nil, nil, false
		}
		f.c.DropControl()
		close(held)
		f.c.SleepControl(func() { <-release })
		close(resumed)
		return nil, nil, false
	})
	evs := []*encoding.Event{
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2)),
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 3)),
	}
	err := s.Write(context.Background(), evs)
	if err == nil {
		t.Fatal("a Write whose request the broker held past the request timeout reported success")
	}
	if sinks.ItemError(err, 0) != nil || sinks.ItemError(err, 1) == nil {
		t.Fatalf("Write = %v; want a/2 acknowledged and a/3, in the lost request, failed", err)
	}
	<-held
	close(release)
	<-resumed
	// The dispatcher's retry: the event that failed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, evs[1:]); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}

	var got []string
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
		got = append(got, ev.Extensions()[encoding.ExtName].(string)+"/"+ev.Extensions()[encoding.ExtResourceVersion].(string))
	}
	g := strings.Join(got, ",")
	for _, w := range want {
		if g == w {
			return
		}
	}
	t.Errorf("the partition holds %s, want %s", g, strings.Join(want, " or "))
}
