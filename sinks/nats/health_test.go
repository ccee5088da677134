package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// An idle sink whose server goes away must turn unhealthy without waiting
// for a write that may not come for a long time, and healthy again when the
// client reconnects.
func TestAnIdleSinkTurnsUnhealthyWhenTheServerGoesAwayAndHealthyWhenItReturns(t *testing.T) {
	b := startBroker(t)
	const name = "idle-health"
	d := dispatch.NewDispatcher(name, newSink(t, name, b.sinkConfig(kwnats.ModeCore)), dispatch.Options{})
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Close(ctx)
	})
	gauge := func() float64 { return testutil.ToFloat64(metrics.SinkHealthy.WithLabelValues(name)) }
	var none error
	testkit.Within(t, 20*time.Second, "the sink to be healthy once connected", func() bool {
		return d.Health() == dispatch.HealthOK && gauge() == 1
	}, func() string { return fmt.Sprintf("last error: %v", none) })

	b.Stop(t)
	testkit.Within(t, 20*time.Second, "the sink to report disconnected with no write in between", func() bool {
		return d.Health() == dispatch.HealthDisconnected && !d.Healthy() && gauge() == 0
	}, func() string { return fmt.Sprintf("last error: %v", none) })

	b.Start(t)
	testkit.Within(t, 20*time.Second, "the sink to be healthy again once the client reconnects", func() bool {
		return d.Health() == dispatch.HealthOK && gauge() == 1
	}, func() string { return fmt.Sprintf("last error: %v", none) })
}
