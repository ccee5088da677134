package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	kwhttp "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// What docs/sinks/kafka.md ("What kubewire needs from a topic") asks of an
// existing topic; a weaker one is a warning.
const (
	wantReplicationFactor = 3
	wantMinInSyncReplicas = 2
)

// dryRunWait bounds the validate-only creation of missing topics.
const dryRunWait = 3 * time.Second

// checkBrokers connects to each kafka and nats sink's brokers with the
// sink's TLS settings and credentials, as kubewire would, and checks that
// what the sink writes to exists or will be created: every Kafka topic of
// the resources routed to the sink, a JetStream sink's stream. An http
// sink's receiver must answer the OPTIONS request the sink sends when it
// connects, over the sink's TLS and with its auth header. Each line
// starts with the field path it concerns. stdout sinks are not checked,
// nor a sink with a field among badFiles (a file it needs is missing, and
// that was said); n is how many sinks were checked.
func checkBrokers(ctx context.Context, cfg *config.Config, badFiles []string) (res onlineResult, n int) {
	for i, sc := range cfg.Sinks {
		prefix := fmt.Sprintf("sinks[%d].", i)
		if slices.ContainsFunc(badFiles, func(f string) bool { return strings.HasPrefix(f, prefix) }) {
			continue
		}
		switch blk := sc.Block.(type) {
		case *kafka.Config:
			n++
			r := checkKafka(ctx, cfg, sc.Name, fmt.Sprintf("sinks[%d].kafka", i), blk)
			res.failures = append(res.failures, r.failures...)
			res.warnings = append(res.warnings, r.warnings...)
		case *kwnats.Config:
			n++
			r := checkNATS(ctx, fmt.Sprintf("sinks[%d].nats", i), blk)
			res.failures = append(res.failures, r.failures...)
			res.warnings = append(res.warnings, r.warnings...)
		case *kwhttp.Config:
			n++
			res.failures = append(res.failures, checkHTTP(ctx, sc.Name, fmt.Sprintf("sinks[%d].http", i), blk)...)
		}
	}
	return res, n
}

// kafkaTopics maps each topic the sink writes to the path of the first
// resource routed there.
func kafkaTopics(cfg *config.Config, sink string, k *kafka.Config) (topics []string, from map[string]string) {
	from = map[string]string{}
	for i, rc := range cfg.Resources {
		if !slices.Contains(rc.Sinks, sink) {
			continue
		}
		t := kafka.TopicName(k.Topic, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
		if _, ok := from[t]; !ok {
			topics = append(topics, t)
			from[t] = fmt.Sprintf("resources[%d]", i)
		}
	}
	return topics, from
}

func checkKafka(ctx context.Context, cfg *config.Config, sink, path string, blk *kafka.Config) onlineResult {
	var res onlineResult
	k := blk.Defaulted()
	d, err := kafka.Dialer(blk)
	if err != nil {
		res.fail("%s: %v", path, err)
		return res
	}
	client := &kafkago.Client{
		Addr:      kafkago.TCP(k.Brokers...),
		Transport: &kafkago.Transport{TLS: d.TLS, SASL: d.SASLMechanism, ClientID: d.ClientID, DialTimeout: d.Timeout},
		Timeout:   k.RequestTimeout.Duration,
	}
	// All topics: a request naming them could make a broker with
	// auto.create.topics.enable create them.
	meta, err := client.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		how := ""
		if k.SASL != nil {
			how = fmt.Sprintf(" with SASL %s as user %q", k.SASL.Mechanism, k.SASL.Username)
		}
		res.fail("%s.brokers: cannot connect to the brokers%s: %v", path, how, err)
		return res
	}
	existing := map[string]kafkago.Topic{}
	for _, t := range meta.Topics {
		existing[t.Name] = t
	}
	topics, from := kafkaTopics(cfg, sink, &k)
	var missing, present []string
	for _, t := range topics {
		if _, ok := existing[t]; ok {
			present = append(present, t)
		} else {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		if k.CreateTopics == nil {
			for _, t := range missing {
				res.fail("%s.topic: topic %q (%s) does not exist, and createTopics is off: create it, or set createTopics", path, t, from[t])
			}
		} else {
			res.failures = append(res.failures, createTopicsDryRun(ctx, client, path, k.CreateTopics, missing, from)...)
		}
	}
	for _, t := range present {
		res.warnings = append(res.warnings, weakTopic(path, t, from[t], existing[t])...)
	}
	if len(present) > 0 {
		res.warnings = append(res.warnings, weakTopicConfigs(ctx, client, path, present, from)...)
	}
	return res
}

// createTopicsDryRun asks the brokers to validate creating the missing
// topics as the sink would, without creating them: it fails on what
// creation would fail on, a permission or a replication factor above the
// brokers' count.
func createTopicsDryRun(ctx context.Context, client *kafkago.Client, path string, ct *kafka.CreateTopics, missing []string, from map[string]string) []string {
	req := &kafkago.CreateTopicsRequest{ValidateOnly: true}
	for _, t := range missing {
		tc := kafkago.TopicConfig{Topic: t, NumPartitions: ct.Partitions, ReplicationFactor: ct.ReplicationFactor}
		if ct.CleanupPolicy != "" {
			tc.ConfigEntries = []kafkago.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: ct.CleanupPolicy}}
		}
		req.Topics = append(req.Topics, tc)
	}
	// kafka-go waits, after the answer, for the topics it was told were
	// created to appear in the metadata, until ctx ends; a dry run's never
	// do. So the request gets a short deadline of its own: the answer
	// comes within it, and the wait ends with it.
	dctx, cancel := context.WithTimeout(ctx, dryRunWait)
	defer cancel()
	resp, err := client.CreateTopics(dctx, req)
	if err != nil {
		return []string{fmt.Sprintf("%s.createTopics: cannot check that %d missing topic(s) can be created: %v", path, len(missing), err)}
	}
	var failures []string
	for _, t := range missing {
		if err := resp.Errors[t]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
			failures = append(failures, fmt.Sprintf("%s.createTopics: topic %q (%s) does not exist and cannot be created: %v", path, t, from[t], err))
		}
	}
	return failures
}

// weakTopic warns when a topic's partitions have fewer replicas than
// docs/sinks/kafka.md asks.
func weakTopic(path, name, from string, t kafkago.Topic) []string {
	rf := 0
	for i, p := range t.Partitions {
		if i == 0 || len(p.Replicas) < rf {
			rf = len(p.Replicas)
		}
	}
	if len(t.Partitions) > 0 && rf < wantReplicationFactor {
		return []string{fmt.Sprintf("%s.topic: topic %q (%s) has replication factor %d; docs/sinks/kafka.md asks for %d or more, so that a broker can be down and the topic still takes writes", path, name, from, rf, wantReplicationFactor)}
	}
	return nil
}

// weakTopicConfigs warns about min.insync.replicas below 2 and unclean
// leader election, per topic.
func weakTopicConfigs(ctx context.Context, client *kafkago.Client, path string, topics []string, from map[string]string) []string {
	req := &kafkago.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafkago.DescribeConfigRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t,
			ConfigNames: []string{"min.insync.replicas", "unclean.leader.election.enable"},
		})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return []string{fmt.Sprintf("%s.topic: cannot read the topics' settings (min.insync.replicas, unclean.leader.election.enable): %v", path, err)}
	}
	var warnings []string
	for _, r := range resp.Resources {
		if r.Error != nil {
			warnings = append(warnings, fmt.Sprintf("%s.topic: cannot read the settings of topic %q (%s): %v", path, r.ResourceName, from[r.ResourceName], r.Error))
			continue
		}
		for _, e := range r.ConfigEntries {
			switch e.ConfigName {
			case "min.insync.replicas":
				if n, err := strconv.Atoi(e.ConfigValue); err == nil && n < wantMinInSyncReplicas {
					warnings = append(warnings, fmt.Sprintf("%s.topic: topic %q (%s) has min.insync.replicas %d; docs/sinks/kafka.md asks for %d, or acks: all is met by the leader alone and losing its disk loses acknowledged changes", path, r.ResourceName, from[r.ResourceName], n, wantMinInSyncReplicas))
				}
			case "unclean.leader.election.enable":
				if e.ConfigValue == "true" {
					warnings = append(warnings, fmt.Sprintf("%s.topic: topic %q (%s) has unclean.leader.election.enable true; docs/sinks/kafka.md asks for false, or a replica that was not in sync can become leader and drop acknowledged changes", path, r.ResourceName, from[r.ResourceName]))
				}
			}
		}
	}
	return warnings
}

func checkNATS(ctx context.Context, path string, blk *kwnats.Config) onlineResult {
	var res onlineResult
	n := blk.Defaulted()
	nc, err := kwnats.Dial(blk)
	if err != nil {
		res.fail("%s.servers: %v", path, err)
		return res
	}
	defer nc.Close()
	if n.Mode != kwnats.ModeJetStream {
		return res
	}
	js, err := jetstream.New(nc)
	if err != nil {
		res.fail("%s.jetstream: %v", path, err)
		return res
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		res.fail("%s.jetstream: JetStream is not available to this user: %v", path, err)
		return res
	}
	subject := kwnats.StreamSubject(n.Subject)
	if st := n.JetStream.Stream; st != nil {
		// The sink creates or updates it on connect.
		if _, err := js.Stream(ctx, st.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			res.fail("%s.jetstream.stream.name: cannot look up stream %q: %v", path, st.Name, err)
		}
		return res
	}
	if _, err := js.StreamNameBySubject(ctx, subject); err != nil {
		res.fail("%s.subject: no stream captures %s, and jetstream.stream is not set for kubewire to create one: %v", path, subject, err)
	}
	return res
}

// checkHTTP connects as the sink does at start: the same client, TLS and
// headers, and the same OPTIONS probe, so that validate and kubewire agree
// on what reaching the receiver means. Any HTTP answer will do: a receiver
// need not know OPTIONS, and only an event tells whether it takes the
// credentials.
func checkHTTP(ctx context.Context, name, path string, blk *kwhttp.Config) []string {
	s, err := kwhttp.New(name, blk, sinks.Deps{})
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	defer s.Close(context.WithoutCancel(ctx))
	if err := s.Connect(ctx); err != nil {
		return []string{fmt.Sprintf("%s.url: cannot reach the receiver: %v", path, err)}
	}
	return nil
}
