package faults_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/nats"
)

// read calls fn for every event in a sink's topic (for resource) or stream.
func read(t *testing.T, cfg *config.Config, sink, resource string, fn func(*event.Event)) {
	t.Helper()
	sc, _ := cfg.Sink(sink)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch blk := sc.Block.(type) {
	case *kafka.Config:
		topic := kafka.TopicName(blk.Topic, cfg.Cluster, "", "v1", resource)
		err = kafka.ReadTopic(ctx, blk, topic, func(r kafka.Record) error {
			if r.Event != nil {
				fn(r.Event)
			}
			return nil
		})
	case *nats.Config:
		err = nats.ReadStream(ctx, blk, func(ev *event.Event) error { fn(ev); return nil })
	}
	if err != nil {
		t.Fatalf("read %s: %v", sink, err)
	}
}

// The stdout variant of this test lives in internal/wiring/app; this one reads
// back what Kafka and JetStream stored, as their consumers would.
func TestSecretValuesReachNoBrokerInAnyEncoding(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	yaml := strings.Replace(brokers(t, ns), "resource: configmaps", "resource: secrets", 1)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	testkit.Eventually(t, "the initial snapshot on every sink", k.App.Ready)

	first, second := "kafka-secret-1-d41d", "kafka-secret-2-8f00"
	b64 := base64.StdEncoding.EncodeToString
	secrets := kube.CoreV1().Secrets(ns)
	s, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"` + b64([]byte(first)) + `"}}`}},
		Data: map[string][]byte{"password": []byte(first)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte(second)
	s.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"data":{"password":"` + b64([]byte(second)) + `"}}`
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"kafka", "js"} {
		var evs []*event.Event
		testkit.Eventually(t, sink+" to hold the add, update and delete", func() bool {
			evs = nil
			read(t, cfg, sink, "secrets", func(ev *event.Event) { evs = append(evs, ev) })
			for _, ev := range evs {
				if ev.Type() == "io.kubewire.object.deleted" {
					return true
				}
			}
			return false
		})
		var digests []string
		for _, ev := range evs {
			raw, _ := json.Marshal(ev)
			for _, v := range []string{first, second} {
				for _, enc := range []string{v, b64([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)), base64.URLEncoding.EncodeToString([]byte(v))} {
					if strings.Contains(string(raw), enc) || strings.Contains(string(ev.Data()), enc) {
						t.Errorf("%s: event %s carries %q", sink, ev.ID(), enc)
					}
				}
			}
			if strings.Contains(string(raw), "last-applied-configuration") {
				t.Errorf("%s: event %s carries the last-applied annotation", sink, ev.ID())
			}
			var obj struct {
				Data map[string]string `json:"data"`
			}
			if json.Unmarshal(ev.Data(), &obj) == nil && obj.Data["password"] != "" && ev.Type() != "io.kubewire.object.deleted" {
				digests = append(digests, obj.Data["password"])
			}
		}
		if len(digests) != 2 || !strings.HasPrefix(digests[0], "sha256:") || digests[0] == digests[1] {
			t.Errorf("%s: digests %v; want an added and an updated sha256 digest that differ", sink, digests)
		}
	}
}
