package consumer_test

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	natssink "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// withKV makes the sink keep the bucket too.
func withKV(bucket string) func(*natssink.Config) {
	return func(n *natssink.Config) {
		n.JetStream.KV = &natssink.KV{Bucket: bucket, Create: true, Storage: natssink.StorageMemory}
	}
}

func kvView(t *testing.T, kv jetstream.KeyValue) *consumer.View {
	t.Helper()
	v := consumer.NewView(consumer.Options{})
	src, err := consumer.NewKVSource(v, consumer.KVConfig{KeyValue: kv})
	if err != nil {
		t.Fatal(err)
	}
	runSource(t, src.Run)
	return v
}

// bucketKeys lists the bucket's live keys, sorted.
func bucketKeys(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	keys, err := kv.Keys(context.Background())
	if err != nil && err != jetstream.ErrNoKeysFound {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

func TestTheSinksKeyValueBucketHoldsEachLiveObjectAndAViewFollowsItLiveAndFromItsState(t *testing.T) {
	url, js := startNATS(t)
	for _, mode := range []string{config.ContentModeBinary, config.ContentModeStructured} {
		t.Run(mode, func(t *testing.T) {
			stream, bucket := "KV"+mode, "objects-"+mode
			s := natsSink(t, url, mode, stream, withKV(bucket))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatalf("the sink did not create the bucket: %v", err)
			}
			// One view follows the bucket while the sink writes, another
			// starts from what the bucket holds afterwards.
			live := kvView(t, kv)
			write(t, s, scenario("snap-1"))
			testkit.Eventually(t, "the live view to hold the scenario's objects", func() bool {
				return reflect.DeepEqual(viewHolds(t, live), scenarioHolds)
			}, func() string { return fmtList(viewHolds(t, live)) })
			checkViewAndInformer(t, live, scenarioHolds)
			checkViewAndInformer(t, kvView(t, kv), scenarioHolds)

			// b was deleted and d pruned by the snapshot: neither key is
			// left, and markers wrote nothing.
			if got, want := bucketKeys(t, kv), []string{"widgets_demo_kubewire_io.team-a.a", "widgets_demo_kubewire_io.team-a.e", "widgets_demo_kubewire_io.team-b.c"}; !reflect.DeepEqual(got, want) {
				t.Errorf("the bucket holds keys %v, want %v", got, want)
			}

			// A later delete and a re-creation reach the live view.
			write(t, s, [][]*informer.Change{{
				sinktest.Change(informer.OpDeleted, "team-a", "a", 10),
				sinktest.Change(informer.OpAdded, "team-b", "f", 11),
				sinktest.Change(informer.OpUpdated, "team-b", "c", 12),
			}})
			want := []string{"c@12#uid-team-b-c", "e@7#uid-team-a-e", "f@11#uid-team-b-f"}
			testkit.Eventually(t, "the live view to follow the delete, the add and the update", func() bool {
				return reflect.DeepEqual(viewHolds(t, live), want)
			}, func() string { return fmtList(viewHolds(t, live)) })
			checkViewAndInformer(t, kvView(t, kv), want)
		})
	}
}
