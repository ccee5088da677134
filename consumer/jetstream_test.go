package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// startNATS runs an embedded nats-server with JetStream for the test and
// returns a JetStream client on it.
func startNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Embedded(t)
	nc, err := natsgo.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), js
}

// natsSink returns kubewire's NATS sink in JetStream mode, connected,
// provisioning a stream of its own; edits change its config first.
func natsSink(t *testing.T, url, mode, stream string, edits ...func(*kwnats.Config)) sinks.Sink {
	t.Helper()
	c := &config.Config{
		APIVersion: config.APIVersion, Kind: config.Kind, Cluster: "conformance",
		Resources: []config.Resource{{Version: "v1", Resource: "configmaps", Sinks: []string{"js"}}},
		Sinks: []config.Sink{{Name: "js", Type: kwnats.Type, Block: &kwnats.Config{
			Mode: kwnats.ModeJetStream, Servers: []string{url}, ContentMode: mode,
			Subject:   stream + ".{cluster}.{group}.{version}.{resource}.{namespace}.{name}",
			JetStream: &kwnats.JetStream{Stream: &kwnats.Stream{Name: stream}},
		}}},
	}
	for _, e := range edits {
		e(c.Sinks[0].Block.(*kwnats.Config))
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	s, err := kwnats.Spec.New(c.Sinks[0].Name, c.Sinks[0].Block, sinks.Deps{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	connectSink(t, s)
	return s
}

func jetStreamView(t *testing.T, cfg consumer.JetStreamConfig) (*consumer.View, func()) {
	t.Helper()
	v := consumer.NewView(consumer.Options{})
	src, err := consumer.NewJetStreamSource(v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v, runSource(t, src.Run)
}

func TestWhatKubewiresJetStreamSinkWroteIsReadBackIntoAViewAndAnInformer(t *testing.T) {
	url, js := startNATS(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			stream := "KW" + mode
			write(t, natsSink(t, url, mode, stream), scenario("snap-1"))
			v, _ := jetStreamView(t, consumer.JetStreamConfig{JetStream: js, Stream: stream})
			checkViewAndInformer(t, v, scenarioHolds)
			if st := v.Stats(); st.Pruned != 1 {
				t.Errorf("stats %+v: want the pruned key counted", st)
			}
		})
	}
}

func TestAJetStreamSourceResumesFromAStoredPositionAndWhereItsDurableAcked(t *testing.T) {
	url, js := startNATS(t)
	s := natsSink(t, url, config.ContentModeBinary, "KW")
	write(t, s, scenario("snap-1"))
	ordered, _ := jetStreamView(t, consumer.JetStreamConfig{JetStream: js, Stream: "KW"})
	durable, stopDurable := jetStreamView(t, consumer.JetStreamConfig{JetStream: js, Stream: "KW", Durable: "audit"})
	for _, v := range []*consumer.View{ordered, durable} {
		checkViewAndInformer(t, v, scenarioHolds)
	}
	stored := ordered.Position()
	stopDurable()
	// Every message the View applied was acked.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "KW", "audit")
	if err != nil {
		t.Fatal(err)
	}
	last := uint64(stored["KW"] - 1)
	var info *jetstream.ConsumerInfo
	testkit.Eventually(t, "every applied message to be acked", func() bool {
		info, err = c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == last
	}, func() string {
		if info == nil {
			return err.Error()
		}
		return fmt.Sprintf("ack pending %d, ack floor %d, want 0 and %d", info.NumAckPending, info.AckFloor.Stream, last)
	})

	write(t, s, [][]*informer.Change{{sinktest.Change(informer.OpAdded, "team-a", "later", 9)}})
	for _, tc := range []struct {
		name string
		cfg  consumer.JetStreamConfig
	}{
		{"from the stored position", consumer.JetStreamConfig{JetStream: js, Stream: "KW", Start: stored}},
		{"where the durable consumer acked", consumer.JetStreamConfig{JetStream: js, Stream: "KW", Durable: "audit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := jetStreamView(t, tc.cfg)
			checkViewAndInformer(t, v, []string{"later@9#uid-team-a-later"})
		})
	}
}
