//go:build e2e

package faults_test

import (
	"testing"

	"github.com/kubewire/kubewire/internal/kafkatest"
	"github.com/kubewire/kubewire/internal/natstest"
)

// The SIGKILL resume test on Apache Kafka and a nats-server process: every
// version the churn wrote must be in the real topic and stream.
func TestE2EKubewireSIGKILLedUnderChurnResumesOnRealKafkaAndJetStreamWithNoVersionMissing(t *testing.T) {
	testSIGKILLResume(t, "checkpoint", func(t *testing.T) (string, string) {
		kb := kafkatest.Start(t, nil)
		nsrv := natstest.Start(t)
		return kb.Addr, nsrv.URL()
	}, "Apache Kafka/nats-server")
}
