package kafka

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/internal/base/metrics"
)

func TestAKafkaProduceIsObservedUnderBothTheNewAndTheDeprecatedHistogramName(t *testing.T) {
	metrics.Register((*Config)(nil).Collectors()...)
	(&Sink{name: "renametest"}).series().observeProduce(0.25)
	for _, name := range []string{"kubewire_kafka_produce_duration_seconds", "kubewire_kafka_produce_seconds"} {
		mfs, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "renametest" {
					found = true
					if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.25 {
						t.Fatalf("%s: count %d sum %v, want 1 and 0.25", name, h.GetSampleCount(), h.GetSampleSum())
					}
				}
			}
		}
		if !found {
			t.Fatalf("%s has no series for the sink", name)
		}
	}
	if n := testutil.CollectAndCount(mProduceDuration); n < 1 {
		t.Fatalf("mProduceDuration collects %d series", n)
	}
}
