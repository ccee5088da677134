package kafka_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The broker holds a produce request until long after kubewire gave up on
// it, as a broker does that restarts under load. kubewire retries the change
// and sends a newer one; then the held request is processed. An idempotent
// producer has moved to a new epoch by then, so the broker refuses the stale
// copy; without idempotence it lands after the newer change. The second
// case shows the test can tell the two apart.
func TestALateCopyOfARequestKubewireGaveUpOnNeverLandsAfterNewerChanges(t *testing.T) {
	cases := []struct {
		name       string
		idempotent bool
		want       string
	}{
		{"An idempotent producer's stale request is refused.", true, "warm-up,a/2,a/3,after"},
		{"Without idempotence the stale request lands out of order.", false, "warm-up,a/2,a/3,a/2,after"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startFake(t)
			s, prefix := newSink(t, f.addr(), 1, func(k *config.KafkaSink) {
				k.Batch = &config.KafkaBatch{Linger: config.NewDuration(0)}
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
			a2 := []*event.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
			if err := s.Write(context.Background(), a2); err == nil {
				t.Fatal("a Write whose request the broker held past the request timeout reported success")
			}
			<-held
			// What the dispatcher does next: the same change again, then newer ones.
			write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))
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
// answer comes after the request timeout). The dispatcher then retries the
// whole Write. What went out before the lost request is not sent again,
// and no request held two events of one object, so each object's repeated
// event directly follows its first copy: a/3 a/3, never a/2 a/3 a/2 a/3.
func TestARetryAfterALostAnswerRepeatsAnEventNextToItsFirstCopy(t *testing.T) {
	f := startFake(t)
	s, prefix := newSink(t, f.addr(), 1, func(k *config.KafkaSink) {
		k.Batch = &config.KafkaBatch{Linger: config.NewDuration(0)}
		k.RequestTimeout = config.NewDuration(time.Second)
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
	evs := []*event.Event{
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2)),
		mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 3)),
	}
	if err := s.Write(context.Background(), evs); err == nil {
		t.Fatal("a Write whose request the broker held past the request timeout reported success")
	}
	<-held
	close(release)
	<-resumed
	// The dispatcher's retry: the same events.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, evs); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}

	var got []string
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, f.addr(), widgetTopic(prefix))) {
		got = append(got, ev.Extensions()[encoding.ExtName].(string)+"/"+ev.Extensions()[encoding.ExtResourceVersion].(string))
	}
	// a/3 appears once if the broker drops the stale copy, twice if it
	// appended it before the retry; either way next to itself.
	if g := strings.Join(got, ","); g != "warm-up/1,a/2,a/3,a/3" && g != "warm-up/1,a/2,a/3" {
		t.Errorf("the partition holds %s, want warm-up/1,a/2,a/3 with a/3 at most repeated next to itself", g)
	}
}
