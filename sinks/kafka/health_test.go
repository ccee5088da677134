package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// linkRecorder is a sinks.ConnectionNotifier callback that keeps every
// report, as the dispatcher would see them.
type linkRecorder struct {
	mu      sync.Mutex
	reports []bool
}

func (r *linkRecorder) up(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, v)
}

// last is the latest report, and whether there was one.
func (r *linkRecorder) last() (up, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return false, false
	}
	return r.reports[len(r.reports)-1], true
}

func (r *linkRecorder) is(want bool) func() bool {
	return func() bool { v, ok := r.last(); return ok && v == want }
}

func (r *linkRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint("reports so far: ", r.reports)
}

// stop closes the fake cluster, as a broker that went away; start brings it
// back at the same port and data.
func (f *fakeKafka) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c.Close()
}

func (f *fakeKafka) startAgain(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.start(t)
}

// watchers counts the goroutines running a sink's connection probe.
func watchers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("kafka.(*Sink).watchConnection("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// An idle sink makes no requests, so only its probe can notice that the
// broker went away; it must report the connection down within a few probe
// intervals, and up again once the broker is back. Close must stop the
// probe.
func TestAnIdleSinkReportsItsConnectionDownWhenTheBrokerGoesAwayAndUpWhenItReturns(t *testing.T) {
	for _, tc := range []struct {
		name string
		// writeFirst makes the sink know a topic, whose metadata the probe
		// then reads as well.
		writeFirst bool
	}{
		{name: "a sink that never wrote"},
		{name: "a sink that wrote once and then went idle", writeFirst: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t)
			before := watchers()
			s, _ := newSink(t, f.addr(), 1, nil)
			kafka.SetProbeInterval(s, 50*time.Millisecond)
			rec := &linkRecorder{}
			s.(sinks.ConnectionNotifier).NotifyConnection(rec.up)
			connect(t, s)
			testkit.Within(t, 5*time.Second, "the connection to be reported up after Connect", rec.is(true), rec.String)
			if tc.writeFirst {
				write(t, s, sinktest.Change(informer.OpAdded, "team-a", "cm-1", 1))
			}

			f.stop()
			testkit.Within(t, 10*time.Second, "the idle sink to report its connection down", rec.is(false), rec.String)
			f.startAgain(t)
			testkit.Within(t, 10*time.Second, "the idle sink to report its connection up again", rec.is(true), rec.String)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// Close waits for the probe to say it is done; the goroutine
			// itself returns just after, so it may still be on its way out.
			testkit.Within(t, 5*time.Second, "the connection probe to stop after Close",
				func() bool { return watchers() == before },
				func() string { return fmt.Sprintf("%d connection probes still run", watchers()-before) })
		})
	}
}

// A broker that refuses a record as too large answered: the connection is
// fine, and reporting it down would make a healthy sink unready for a bad
// event.
func TestARecordTheBrokerRefusesAsTooLargeDoesNotReportTheConnectionDown(t *testing.T) {
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%t", idempotent), func(t *testing.T) {
			f := startFake(t)
			s, prefix := newSink(t, f.addr(), 1, func(k *kafka.Config) { k.Idempotent = &idempotent })
			kafka.SetProbeInterval(s, time.Hour) // only the writes report
			c := &kafkago.Client{Addr: kafkago.TCP(f.addr()), Timeout: 10 * time.Second}
			res, err := c.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
				Topic: widgetTopic(prefix), NumPartitions: 1, ReplicationFactor: 1,
				ConfigEntries: []kafkago.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "4000"}},
			}}})
			if err != nil || res.Errors[widgetTopic(prefix)] != nil {
				t.Fatalf("create topic: %v %v", err, res.Errors)
			}
			rec := &linkRecorder{}
			s.(sinks.ConnectionNotifier).NotifyConnection(rec.up)
			connect(t, s)

			bigObject := sinktest.Object("team-a", "big", 2)
			bigObject.Object["spec"] = map[string]any{"blob": strings.Repeat("x", 10000)}
			big := sinktest.ChangeOf(informer.OpUpdated, bigObject)
			refused := testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference"))
			write(t, s, big)
			if testutil.ToFloat64(kafka.Oversized.WithLabelValues("kafka-test", "reference")) == refused {
				t.Fatal("the broker did not refuse the event as too large; the test proves nothing")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, up := range rec.reports {
				if !up {
					t.Fatalf("the sink reported its connection down after a too-large refusal; %v", rec.reports)
				}
			}
		})
	}
}

// errorLog is a logger that keeps what is logged at ERROR, for tests that
// expect nothing there.
type errorLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *errorLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *errorLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelError}))
}

// healthSink is newSink with a logger and a short probe interval.
func healthSink(t testing.TB, name, addr string, log *slog.Logger) sinks.Sink {
	t.Helper()
	s, err := kafka.New(name, &kafka.Config{
		Brokers:        []string{addr},
		Topic:          uniquePrefix(t) + ".{group}.{resource}",
		CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second),
		DialTimeout:    config.NewDuration(2 * time.Second),
	}, sinks.Deps{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	kafka.SetProbeInterval(s, 100*time.Millisecond)
	return s
}

// idleHealthFollowsTheBroker checks the dispatcher's view of an idle sink
// across a broker outage: healthy, disconnected while the broker is down,
// healthy once it is back; and nothing logged at ERROR, a clean Close
// included.
func idleHealthFollowsTheBroker(t *testing.T, addr string, down, up func(), within time.Duration) {
	const name = "kafka-health"
	var errs errorLog
	d := dispatch.NewDispatcher(name, healthSink(t, name, addr, errs.logger()), dispatch.Options{Logger: errs.logger()})
	d.Start()
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close(context.Background())
		}
	})
	gauge := func() float64 { return testutil.ToFloat64(metrics.SinkHealthy.WithLabelValues(name)) }
	state := func() string { return fmt.Sprintf("health %s, kubewire_sink_healthy %v", d.Health(), gauge()) }
	testkit.Within(t, within, "the sink to be healthy once connected", func() bool {
		return d.Health() == dispatch.HealthOK && gauge() == 1
	}, state)
	// One change, so that the sink has a topic, then nothing.
	d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpAdded, "team-a", "cm-1", 1)))
	testkit.Within(t, within, "the change to be delivered", func() bool { return d.Queued() == 0 }, state)

	down()
	start := time.Now()
	testkit.Within(t, within, "the idle sink to be disconnected", func() bool {
		return d.Health() == dispatch.HealthDisconnected && gauge() == 0
	}, state)
	t.Logf("disconnected %v after the broker went down", time.Since(start).Round(time.Millisecond))
	up()
	start = time.Now()
	testkit.Within(t, within, "the idle sink to be healthy again", func() bool {
		return d.Health() == dispatch.HealthOK && gauge() == 1
	}, state)
	t.Logf("healthy %v after the broker was started again", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed = true
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("%d events undelivered", n)
	}
	if s := errs.String(); s != "" {
		t.Errorf("logged at ERROR:\n%s", s)
	}
}

func TestTheDispatcherSeesAnIdleKafkaSinkDisconnectedWhileKfakeIsDownAndHealthyOnceItIsBack(t *testing.T) {
	f := startFake(t)
	idleHealthFollowsTheBroker(t, f.addr(), f.stop, func() { f.startAgain(t) }, 10*time.Second)
}
