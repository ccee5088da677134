//go:build e2e

package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// The oracle test on Apache Kafka: the broker's own offsets-by-time lookup,
// fetches and topic configs, which kfake only imitates. Then the topic is
// switched to compaction through the broker, and history refuses it,
// having read cleanup.policy back from the broker.
func TestE2EHistoryAtOnApacheKafkaMatchesAnExactListOfTheAPIServerAtIt(t *testing.T) {
	kb := kafkatest.Start(t, nil)
	path, last := historyMatchesExactLists(t, kb.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &kafkago.Client{Addr: kafkago.TCP(kb.Addr), Transport: &kafkago.Transport{}}
	res, err := client.AlterConfigs(ctx, &kafkago.AlterConfigsRequest{Resources: []kafkago.AlterConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: "e2e.history.configmaps",
		Configs: []kafkago.AlterConfigRequestConfig{{Name: "cleanup.policy", Value: "compact"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range res.Errors {
		if err != nil {
			t.Fatalf("altering %v: %v", r, err)
		}
	}
	if _, code, errOut := historyAt(path, "rv:"+last); code != cli.ExitCompacted || !strings.Contains(errOut, `cleanup.policy "compact"`) {
		t.Errorf("history --at rv:%s on a compacted topic: exit %d, want %d\n%s", last, code, cli.ExitCompacted, errOut)
	}
}
