package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
)

func TestTenEventsAboutOnePodLandInOnePartitionInOrder(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	yaml := brokers(t, ns)
	yaml = strings.Replace(yaml, "resource: configmaps, namespaces: [", "resource: events, keyBy: involvedObject, namespaces: [", 1)
	yaml = strings.Replace(yaml, "createTopics: {partitions: 3, replicationFactor: 1}", "createTopics: {partitions: 3, replicationFactor: 1}\n      tombstones: false", 1)
	cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := apptest.Start(t, yaml, cluster.RESTConfig(testcluster.AdminUser))
	testkit.Eventually(t, "the initial snapshot on every sink", k.App.Ready)

	// Events about the Pod interleaved with Events about other objects.
	for i := range 10 {
		for _, about := range []string{"p1", fmt.Sprintf("other-%d", i)} {
			_, err := kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%d", about, i)},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: about},
				Reason:         "Tested", Message: fmt.Sprintf("step %d", i), Type: "Normal",
				FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	topic := kafka.TopicName(cfg.Sinks[0].Block.(*kafka.Config).Topic, cfg.Cluster, "", "v1", "events")
	sc, _ := cfg.Sink("kafka")
	var partitions map[int]bool
	var steps []string
	deadline := time.Now().Add(time.Minute)
	for len(steps) < 10 {
		partitions, steps = map[int]bool{}, nil
		err := kafka.ReadTopic(ctx, sc.Block.(*kafka.Config), topic, func(r kafka.Record) error {
			if r.Event == nil || !strings.HasSuffix(r.Key, "/Pod/"+ns+"/p1") || !strings.HasPrefix(r.Event.Type(), "io.kubewire.object.") {
				return nil
			}
			partitions[r.Partition] = true
			steps = append(steps, r.Event.Subject())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of the 10 Events about p1 arrived: %v", len(steps), steps)
		}
	}
	if len(partitions) != 1 {
		t.Fatalf("the Events about p1 are spread over partitions %v", partitions)
	}
	for i, s := range steps {
		if want := fmt.Sprintf("%s/p1.%d", ns, i); s != want {
			t.Fatalf("event %d about p1 is %s, want %s (in order): %v", i, s, want, steps)
		}
	}
}
