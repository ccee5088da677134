package nats_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// A resource whose subjects no stream captures fails every publish with
// no_stream. Its events must wait, spooled, while the other resources of the
// same sink go on, and follow in order once its stream exists.
func TestAResourceWithoutAStreamWaitsWhileTheOtherResourcesOfTheSinkGoOn(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "iso.{resource}.{name}"
	cfg.PublishTimeout = config.NewDuration(time.Second)
	s := newSink(t, "iso", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js, err := jetstream.New(b.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	// Only nodes have a stream; widgets have none yet.
	nodes, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NODES", Subjects: []string{"iso.nodes.>"}})
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher("iso", s, dispatch.Options{Lanes: 2, BufferEvents: 40, Shards: 4,
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err := d.UseSpool(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
		t.Fatal(err)
	}
	d.Start()
	const perKey = 100
	for rv := 1; rv <= perKey; rv++ {
		d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpUpdated, "team-a", "w0", rv)))
		d.Enqueue(dispatch.NewItem(sinktest.ClusterChange(informer.OpUpdated, "n0", rv)))
	}
	testkit.Within(t, 20*time.Second, "every node event in its stream", func() bool {
		info, err := nodes.Info(ctx)
		return err == nil && info.State.Msgs == perKey
	})
	testkit.Within(t, 20*time.Second, "the widgets to be reported blocked", func() bool {
		return metrics.Sum("kubewire_resource_blocked", map[string]string{"sink": "iso", "resource": sinktest.Resource.KeyPrefix}) == 1
	})

	widgets, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WIDGETS", Subjects: []string{"iso.widgets.>"}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Within(t, 20*time.Second, "every widget event in its new stream", func() bool {
		info, err := widgets.Info(ctx)
		return err == nil && info.State.Msgs >= perKey
	})
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("undelivered: %d", n)
	}
	cons, err := widgets.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	for want <= perKey {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading widget event %d: %v", want, err)
		}
		ev, err := decode(msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		switch rv := ev.Extensions()["resourceversion"]; rv {
		case strconv.Itoa(want):
			want++
		case strconv.Itoa(want - 1):
			// a resend the stream's duplicate window did not cover
		default:
			t.Fatalf("widget events out of order: got rv %v, want %d", rv, want)
		}
	}
}
