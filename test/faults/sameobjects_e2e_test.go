//go:build e2e

package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
)

// kafkaUnderTest is a real Apache Kafka broker with a topic of three
// partitions that kubewire's Kafka sink creates.
func kafkaUnderTest(t *testing.T, ns string) brokerUnderTest {
	kb := kafkatest.Start(t, nil)
	topic := "k8s." + ns + ".configmaps"
	return brokerUnderTest{
		name: "kafka",
		sink: fmt.Sprintf(`  - name: kafka
    type: kafka
    kafka:
      brokers: [%q]
      topic: "k8s.%s.{resource}"
      createTopics: {partitions: 3, replicationFactor: 1}
`, kb.Addr, ns),
		delivered: func() int {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n := 0
			for p := range 3 {
				conn, err := kafkago.DialLeader(ctx, "tcp", kb.Addr, topic, p)
				if err != nil {
					return n
				}
				last, err := conn.ReadLastOffset()
				conn.Close()
				if err == nil {
					n += int(last)
				}
			}
			return n
		},
		kill:    kb.Kill,
		restart: func() { kb.Restart(t) },
		views: func(t *testing.T) map[string]*consumer.View {
			return map[string]*consumer.View{
				"Kafka": runView(t, func(v *consumer.View) (func(context.Context) error, error) {
					s, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: []string{kb.Addr}, Topic: topic})
					if err != nil {
						return nil, err
					}
					return s.Run, nil
				}),
			}
		},
	}
}

func TestE2EAnInformerOnRealKafkaHoldsTheAPIServersObjectsAfterBrokerKillKubewireKillAndRelist(t *testing.T) {
	ns := namespace(t)
	proveSameObjects(t, ns, kafkaUnderTest(t, ns), "real Kafka")
}
