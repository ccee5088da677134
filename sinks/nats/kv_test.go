package nats_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// kvKeyChars is what the server accepts in a bucket key.
var kvKeyChars = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func TestEveryPartitionKeyMapsToAValidBucketKeyThatMapsBack(t *testing.T) {
	cases := []struct {
		partitionKey, want string
	}{
		{"configmaps/shop/web", "configmaps.shop.web"},
		{"namespaces/shop", "namespaces.shop"},
		{"widgets.demo.io/shop/kube-root-ca.crt", "widgets_demo_io.shop.kube-root-ca_crt"},
		{"clusterroles.rbac.authorization.k8s.io/system:controller:job", "clusterroles_rbac_authorization_k8s_io.system=3Acontroller=3Ajob"},
		{"things/ns/a_b", "things.ns.a=5Fb"},
		{"things/ns/a=5Fb", "things.ns.a=3D5Fb"},
		{"things/ns/.hidden", "things.ns.=2Ehidden"},
		{"things/ns/*>~ é", "things.ns.=2A=3E=7E=20=C3=A9"},
		{"things//x", "things._empty.x"},
		{"things/_empty/x", "things.=5Fempty.x"},
	}
	seen := map[string]string{}
	for _, tc := range cases {
		t.Run(tc.partitionKey, func(t *testing.T) {
			got := kwnats.KVKey(tc.partitionKey)
			if got != tc.want {
				t.Errorf("KVKey(%q) = %q, want %q", tc.partitionKey, got, tc.want)
			}
			if !kvKeyChars.MatchString(got) || got[0] == '.' || got[len(got)-1] == '.' || regexp.MustCompile(`\.\.`).MatchString(got) {
				t.Errorf("KVKey(%q) = %q is not a valid bucket key", tc.partitionKey, got)
			}
			back, err := kwnats.PartitionKeyOfKV(got)
			if err != nil || back != tc.partitionKey {
				t.Errorf("PartitionKeyOfKV(%q) = %q, %v; want %q", got, back, err, tc.partitionKey)
			}
			if other, ok := seen[got]; ok && other != tc.partitionKey {
				t.Errorf("%q and %q share the bucket key %q", other, tc.partitionKey, got)
			}
			seen[got] = tc.partitionKey
		})
	}
}

func TestAWriteWhoseBucketWriteFailsIsNotDeliveredAndARetrySucceedsOnceTheBucketIsBack(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "kvt.{namespace}.{name}"
	cfg.JetStream = &kwnats.JetStream{
		Stream: &kwnats.Stream{Name: "KVT"},
		KV:     &kwnats.KV{Bucket: "objects", Create: true},
	}
	s := newSink(t, "kv", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	js, err := jetstream.New(b.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ev := func(op informer.Op, name string, rv int) []*encoding.Event {
		e, err := encoding.New(sinktest.Change(op, "ns", name, rv))
		if err != nil {
			t.Fatal(err)
		}
		return []*encoding.Event{e}
	}
	if err := s.Write(ctx, ev(informer.OpAdded, "a", 1)); err != nil {
		t.Fatal(err)
	}

	// The bucket goes away behind the sink's back: the stream still takes
	// the event, but the Write must fail so that the dispatcher retries.
	if err := js.DeleteKeyValue(ctx, "objects"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err = s.Write(wctx, ev(informer.OpUpdated, "a", 2))
	wcancel()
	if err == nil {
		t.Fatal("Write succeeded although the bucket write could not")
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "objects"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, ev(informer.OpUpdated, "a", 2)); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	e, err := kv.Get(ctx, kwnats.KVKey("widgets.demo.kubewire.io/ns/a"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := kwnats.DecodeMessage(map[string][]string{"Content-Type": {kwnats.ContentTypeStructured}}, e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if rv := got.Extensions()[encoding.ExtResourceVersion]; rv != "2" {
		t.Errorf("the bucket holds resourceVersion %v, want 2", rv)
	}
	st, err := js.Stream(ctx, "KVT")
	if err != nil {
		t.Fatal(err)
	}
	// The stream's duplicate window kept the retried event to one copy.
	if n := st.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("the stream holds %d messages, want 2", n)
	}
}
