package consumer_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// reads records what OnRead saw, as "kind key type", in order.
type reads struct {
	mu  sync.Mutex
	got []string
}

func (r *reads) add(rd consumer.Read) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := rd.Kind + " " + rd.Key
	if rd.Event != nil {
		s += " " + rd.Event.Type()
	}
	r.got = append(r.got, s)
}

func (r *reads) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func TestOnReadSeesEveryEventAndTombstoneOfAPartitionInTheOrderWritten(t *testing.T) {
	addr := startKfake(t)
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	key := resource + "/team-a/a"
	c := sinktest.Change
	write(t, s, [][]*informer.Change{
		{c(informer.OpAdded, "team-a", "a", 1)},
		{c(informer.OpUpdated, "team-a", "a", 2)},
		{c(informer.OpUpdated, "team-a", "a", 2)}, // a duplicate: the View drops it, OnRead sees it
		{c(informer.OpDeleted, "team-a", "a", 3)},
	})
	r := &reads{}
	v := consumer.NewView(consumer.Options{OnRead: r.add})
	src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src.Run)
	want := []string{
		"event " + key + " " + encoding.TypeAdded,
		"event " + key + " " + encoding.TypeUpdated,
		"event " + key + " " + encoding.TypeUpdated,
		"event " + key + " " + encoding.TypeDeleted,
		"tombstone " + key,
	}
	testkit.Eventually(t, "OnRead to see every record", func() bool { return len(r.list()) >= len(want) },
		func() string { return fmt.Sprint(r.list()) })
	if got := r.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("OnRead saw\n%v\nwant\n%v", got, want)
	}
	if st := v.Stats(); st.Duplicates != 1 {
		t.Errorf("stats %+v: want the duplicate dropped by the View", st)
	}
}

func TestASourceFromTheEndReadsOnlyWhatIsWrittenAfterItStarted(t *testing.T) {
	addr := startKfake(t)
	url, js := startNATS(t)
	ks, topic := kafkaSink(t, addr, config.ContentModeBinary)
	ns := natsSink(t, url, config.ContentModeBinary, "KW")
	for _, tc := range []struct {
		name  string
		write func([][]*informer.Change)
		src   func(*consumer.View) (func(context.Context) error, error)
	}{
		{"kafka", func(b [][]*informer.Change) { write(t, ks, b) }, func(v *consumer.View) (func(context.Context) error, error) {
			s, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic, FromEnd: true})
			if err != nil {
				return nil, err
			}
			return s.Run, nil
		}},
		{"jetstream", func(b [][]*informer.Change) { write(t, ns, b) }, func(v *consumer.View) (func(context.Context) error, error) {
			s, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: "KW", FromEnd: true})
			if err != nil {
				return nil, err
			}
			return s.Run, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write(scenario("snap-1"))
			v := consumer.NewView(consumer.Options{})
			run, err := tc.src(v)
			if err != nil {
				t.Fatal(err)
			}
			runSource(t, run)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := v.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			tc.write([][]*informer.Change{{sinktest.Change(informer.OpAdded, "team-a", "later", 9)}})
			testkit.Eventually(t, "the later object", func() bool { return v.Len() > 0 })
			if got := viewHolds(t, v); !reflect.DeepEqual(got, []string{"later@9#uid-team-a-later"}) {
				t.Errorf("the view holds %v, want only the object written after the source started", got)
			}
		})
	}
}
