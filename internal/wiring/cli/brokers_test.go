package cli_test

import (
	"context"
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// brokerConfig routes ConfigMaps to one sink, given as a YAML block.
const brokerConfig = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    sinks: [s]
sinks:
  - name: s
%s`

func TestValidateWithAKubeconfigChecksEachSinksBrokersTopicsAndStreams(t *testing.T) {
	c := testCluster(t)
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := c.WriteKubeconfig(admin, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	kafkaAddr := kc.ListenAddrs()[0]
	// A topic weaker than docs/sinks/kafka.md asks, in every way.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := (&kafkago.Client{Addr: kafkago.TCP(kafkaAddr)}).CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
		Topic: "weak.core.configmaps", NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafkago.ConfigEntry{{ConfigName: "min.insync.replicas", ConfigValue: "1"}, {ConfigName: "unclean.leader.election.enable", ConfigValue: "true"}},
	}}})
	if err != nil || resp.Errors["weak.core.configmaps"] != nil {
		t.Fatalf("create the weak topic: %v %v", err, resp)
	}
	nats := natstest.Embedded(t).ClientURL()
	down := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	// A receiver that knows only POST: any answer to the probe will do.
	receiver := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(nethttp.StatusMethodNotAllowed)
	}))
	t.Cleanup(receiver.Close)
	// A receiver whose certificate the sink's TLS settings do not trust.
	untrusted := httptest.NewTLSServer(nethttp.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	httpSink := func(url string) string { return fmt.Sprintf("    type: http\n    http:\n      url: %q\n", url) }

	kafkaSink := func(topic, extra string) string {
		return fmt.Sprintf("    type: kafka\n    kafka:\n      brokers: [%q]\n      topic: %s\n%s", kafkaAddr, topic, extra)
	}
	for _, tc := range []struct {
		name     string
		sink     string
		args     []string
		code     int
		failures []string
		warnings []string
	}{
		{"a missing topic without createTopics fails at the topic's path",
			kafkaSink("missing.{group}.{resource}", ""), nil, cli.ExitConfig,
			[]string{`sinks[0].kafka.topic: topic "missing.core.configmaps" (resources[0]) does not exist, and createTopics is off`}, nil},
		{"a missing topic that createTopics can create passes",
			kafkaSink("new.{group}.{resource}", "      createTopics: {partitions: 1, replicationFactor: 1}\n"), nil, cli.ExitOK, nil, nil},
		{"a missing topic the brokers would refuse to create fails at createTopics",
			kafkaSink("big.{group}.{resource}", "      createTopics: {partitions: 1, replicationFactor: 3}\n"), nil, cli.ExitConfig,
			[]string{`sinks[0].kafka.createTopics: topic "big.core.configmaps" (resources[0]) does not exist and cannot be created`}, nil},
		{"an existing topic weaker than the docs ask is warned about, setting by setting",
			kafkaSink("weak.{group}.{resource}", ""), nil, cli.ExitOK, nil,
			[]string{"replication factor 1", "min.insync.replicas 1", "unclean.leader.election.enable true"}},
		{"brokers that cannot be reached fail at the brokers' path",
			fmt.Sprintf("    type: kafka\n    kafka:\n      brokers: [%q]\n", down), nil, cli.ExitConfig,
			[]string{"sinks[0].kafka.brokers: cannot connect to the brokers"}, nil},
		{"a JetStream sink with no stream to write to fails at its subject",
			fmt.Sprintf("    type: nats\n    nats:\n      servers: [%q]\n", nats), nil, cli.ExitConfig,
			[]string{"sinks[0].nats.subject: no stream captures kubewire."}, nil},
		{"a JetStream sink that creates its stream passes",
			fmt.Sprintf("    type: nats\n    nats:\n      servers: [%q]\n      jetstream: {stream: {name: KW}}\n", nats), nil, cli.ExitOK, nil, nil},
		{"a NATS server that cannot be reached fails at the servers' path",
			fmt.Sprintf("    type: nats\n    nats:\n      mode: core\n      servers: [\"nats://%s\"]\n", down), nil, cli.ExitConfig,
			[]string{"sinks[0].nats.servers: nats: connect"}, nil},
		{"an http receiver that answers the probe passes, whatever its status",
			httpSink(receiver.URL + "/events"), nil, cli.ExitOK, nil, nil},
		{"an http receiver that cannot be reached fails at the url's path",
			httpSink("http://" + down + "/events"), nil, cli.ExitConfig,
			[]string{"sinks[0].http.url: cannot reach the receiver: http: connect to http://" + down + "/events"}, nil},
		{"an https receiver whose certificate is not trusted fails at the url's path",
			httpSink(untrusted.URL), nil, cli.ExitConfig,
			[]string{"sinks[0].http.url: cannot reach the receiver: http: connect to " + untrusted.URL + ": tls: failed to verify certificate"}, nil},
		{"--check-brokers=false leaves the brokers out",
			fmt.Sprintf("    type: kafka\n    kafka:\n      brokers: [%q]\n", down), []string{"--check-brokers=false"}, cli.ExitOK, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, fmt.Sprintf(brokerConfig, tc.sink))
			code, out, errOut := run(append([]string{"validate", "--config", path, "--kubeconfig", admin}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, f := range tc.failures {
				if !strings.Contains(errOut, path+": "+f) {
					t.Errorf("stderr lacks %q:\n%s", f, errOut)
				}
			}
			for _, w := range tc.warnings {
				if !strings.Contains(out, "warning: sinks[0].kafka.topic: ") || !strings.Contains(out, w) {
					t.Errorf("stdout lacks the warning %q:\n%s", w, out)
				}
			}
			if len(tc.warnings) == 0 && strings.Contains(out, "warning") {
				t.Errorf("unexpected warning:\n%s", out)
			}
		})
	}
	meta, err := (&kafkago.Client{Addr: kafkago.TCP(kafkaAddr)}).Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range meta.Topics {
		if tp.Name != "weak.core.configmaps" {
			t.Errorf("validate created topic %q; it only checks", tp.Name)
		}
	}
}
