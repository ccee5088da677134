package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// A consumer that saves View.Position and starts from it must get the same
// position back when there was nothing new to read: otherwise it saves {}
// and the next start reads the whole topic again (examples/audit-consumer
// appends it all a second time).
func TestAViewStartedFromAStoredPositionThatReadsNothingReturnsThatPosition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored func(t *testing.T) (consumer.Positions, func(*consumer.View, consumer.Positions) func(context.Context) error)
	}{{
		name: "Kafka",
		stored: func(t *testing.T) (consumer.Positions, func(*consumer.View, consumer.Positions) func(context.Context) error) {
			addr := startKfake(t)
			s, topic := kafkaSink(t, addr, config.ContentModeBinary)
			write(t, s, scenario("snap-1"))
			first := kafkaView(t, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic})
			checkViewAndInformer(t, first, scenarioHolds)
			return first.Position(), func(v *consumer.View, p consumer.Positions) func(context.Context) error {
				src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: []string{addr}, Topic: topic, Start: p})
				if err != nil {
					t.Fatal(err)
				}
				return src.Run
			}
		},
	}, {
		name: "JetStream",
		stored: func(t *testing.T) (consumer.Positions, func(*consumer.View, consumer.Positions) func(context.Context) error) {
			url, js := startNATS(t)
			write(t, natsSink(t, url, config.ContentModeBinary, "KW"), scenario("snap-1"))
			first, _ := jetStreamView(t, consumer.JetStreamConfig{JetStream: js, Stream: "KW"})
			checkViewAndInformer(t, first, scenarioHolds)
			return first.Position(), func(v *consumer.View, p consumer.Positions) func(context.Context) error {
				src, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: "KW", Start: p})
				if err != nil {
					t.Fatal(err)
				}
				return src.Run
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stored, source := tc.stored(t)
			if len(stored) == 0 {
				t.Fatal("the first view read nothing")
			}
			v := consumer.NewView(consumer.Options{})
			runSource(t, source(v, stored))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := v.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := v.Position(); !reflect.DeepEqual(got, stored) {
				t.Errorf("a view started at %v that read nothing is at %v", stored, got)
			}
		})
	}
}

// errorLog records what a source's OnError was told.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error, _ time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.errs)
}

func TestAKafkaSourceRidesOutItsBrokerGoingAwayAndReadsOnWhenItIsBack(t *testing.T) {
	port, dir := testkit.FreePort(t), t.TempDir()
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.Ports(port), kfake.DataDir(dir))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := start()
	addr := c.ListenAddrs()[0]
	s, topic := kafkaSink(t, addr, config.ContentModeBinary)
	write(t, s, scenario("snap-1"))

	// The broker is away when Run starts, and once more after the source
	// caught up.
	c.Close()
	v := consumer.NewView(consumer.Options{})
	failures := &errorLog{}
	src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{
		Brokers: []string{addr}, Topic: topic, MaxWait: 100 * time.Millisecond, OnError: failures.add, MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	testkit.Eventually(t, "the source to report that it cannot read", func() bool { return failures.count() > 0 })
	c = start()
	checkViewAndInformer(t, v, scenarioHolds)

	c.Close()
	c = start()
	t.Cleanup(c.Close)
	// The sink's connections went with the broker: a new sink writes.
	s, _ = kafkaSink(t, addr, config.ContentModeBinary)
	write(t, s, [][]*informer.Change{{sinktest.Change(informer.OpAdded, "team-a", "later", 9)}})
	testkit.Eventually(t, "the view to read what was written after the broker came back", func() bool {
		_, ok := v.Lookup(resource + "/team-a/later")
		return ok
	}, func() string {
		select {
		case err := <-done:
			return fmt.Sprintf("Run returned %v", err)
		default:
			return fmt.Sprintf("the view holds %v", viewHolds(t, v))
		}
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v once its context ended, want context.Canceled", err)
	}
	t.Logf("reported: %s", failures)
}

func TestAJetStreamSourceRidesOutItsServerGoingAwayAndReadsOnWhenItIsBack(t *testing.T) {
	port, dir := testkit.FreePort(t), t.TempDir()
	start := func() *natsserver.Server {
		srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return srv
	}
	srv := start()
	url := srv.ClientURL()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	write(t, natsSink(t, url, config.ContentModeBinary, "KW"), scenario("snap-1"))

	// The server is away when Run starts, and once more after the source
	// caught up.
	srv.Shutdown()
	srv.WaitForShutdown()
	v := consumer.NewView(consumer.Options{})
	failures := &errorLog{}
	src, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{
		JetStream: js, Stream: "KW", Durable: "live", OnError: failures.add, MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	testkit.Eventually(t, "the source to report that it cannot read", func() bool { return failures.count() > 0 })
	srv = start()
	checkViewAndInformer(t, v, scenarioHolds)

	reported := failures.count()
	srv.Shutdown()
	srv.WaitForShutdown()
	testkit.Eventually(t, "the source to report the lost server", func() bool { return failures.count() > reported })
	srv = start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	write(t, natsSink(t, url, config.ContentModeBinary, "KW"), [][]*informer.Change{{sinktest.Change(informer.OpAdded, "team-a", "later", 9)}})
	testkit.Eventually(t, "the view to read what was written after the server came back", func() bool {
		_, ok := v.Lookup(resource + "/team-a/later")
		return ok
	}, func() string {
		select {
		case err := <-done:
			return fmt.Sprintf("Run returned %v", err)
		default:
			return fmt.Sprintf("the view holds %v", viewHolds(t, v))
		}
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v once its context ended, want context.Canceled", err)
	}
	t.Logf("reported: %s", failures)
}
