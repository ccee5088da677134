//go:build e2e

package kafka_test

import (
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/kafkatest"
)

// The same check as on kfake, against a real broker killed with SIGKILL
// while the sink is idle and started again on the same port and data.
func TestE2EAnIdleSinkIsDisconnectedWhileTheRealBrokerIsDownAndHealthyOnceItIsBack(t *testing.T) {
	b := kafkatest.Start(t, nil)
	idleHealthFollowsTheBroker(t, b.Addr, b.Kill, func() { b.Restart(t) }, time.Minute)
}
