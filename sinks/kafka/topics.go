package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
)

// partitionsMaxAge is how long a topic's partition count is trusted before
// it is read again (from kafka-go's metadata cache, so it is cheap). Growing
// a topic remaps keys, in Java as here; this bounds how long kubewire keeps
// using the old count.
const partitionsMaxAge = 30 * time.Second

// topicFor expands the topic template for the event's resource, which it
// reads from the event's source (encoding.ParseSource). Sources repeat, so
// the result is cached.
func (s *Sink) topicFor(ev *encoding.Event) (string, error) {
	src := ev.Source()
	s.mu.Lock()
	t, ok := s.sources[src]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	r, ok := encoding.ParseSource(src)
	if !ok {
		return "", fmt.Errorf("kafka: event %s: source %q is not a kubewire resource source", ev.ID(), src)
	}
	t = TopicName(s.cfg.Topic, r.Cluster, r.Group, r.Version, r.Resource)
	if why := ValidateTopicName(t); why != "" {
		return "", fmt.Errorf("kafka: event %s: topic %q %s", ev.ID(), t, why)
	}
	s.mu.Lock()
	s.sources[src] = t
	s.mu.Unlock()
	return t, nil
}

// topic is what the sink knows of one topic: a loop per partition.
type topic struct {
	mu      sync.Mutex
	parts   []*partition
	ids     []int // 0..len(parts)-1, for the balancer
	checked time.Time
}

// partitions returns the topic with its partition loops, looking up its
// partition count (and creating it, if configured) when it is first used
// and every partitionsMaxAge after.
func (s *Sink) partitions(ctx context.Context, name string) (*topic, error) {
	s.mu.Lock()
	t := s.topics[name]
	if t == nil {
		t = &topic{}
		s.topics[name] = t
	}
	client := s.client
	s.mu.Unlock()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.parts != nil && time.Since(t.checked) < partitionsMaxAge {
		return t, nil
	}
	n, err := s.partitionCount(ctx, client, name)
	if err != nil {
		if t.parts != nil {
			// Keep producing with what we know; the produce requests
			// themselves report a broker that is really gone.
			return t, nil
		}
		return nil, err
	}
	for i := len(t.parts); i < n; i++ {
		p := &partition{s: s, topic: name, id: i, wake: make(chan struct{}, 1), objects: map[string]struct{}{},
			resolved: map[recordKey]struct{}{}}
		s.wg.Add(1)
		go p.run(s.life)
		t.parts = append(t.parts, p)
		t.ids = append(t.ids, i)
	}
	t.checked = time.Now()
	return t, nil
}

func (s *Sink) partitionCount(ctx context.Context, client *kafkago.Client, name string) (int, error) {
	for attempt := 0; ; attempt++ {
		md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{name}})
		if err != nil {
			// Only a failure is news: kafka-go answers Metadata from its
			// cache, so a success says nothing of the connection.
			s.observe(err)
			return 0, fmt.Errorf("kafka: metadata of topic %s: %w", name, err)
		}
		var tm *kafkago.Topic
		for i := range md.Topics {
			if md.Topics[i].Name == name {
				tm = &md.Topics[i]
			}
		}
		switch {
		case tm != nil && tm.Error == nil && len(tm.Partitions) > 0:
			return len(tm.Partitions), nil
		case tm != nil && tm.Error != nil && !errors.Is(tm.Error, kafkago.UnknownTopicOrPartition):
			return 0, fmt.Errorf("kafka: metadata of topic %s: %w", name, tm.Error)
		case s.cfg.CreateTopics == nil:
			return 0, fmt.Errorf("kafka: topic %s does not exist (create it, or set createTopics)", name)
		case attempt > 0:
			return 0, fmt.Errorf("kafka: topic %s was created but has no partitions yet", name)
		}
		if err := s.createTopic(ctx, client, name); err != nil {
			return 0, err
		}
	}
}

func (s *Sink) createTopic(ctx context.Context, client *kafkago.Client, name string) error {
	c := s.cfg.CreateTopics
	res, err := client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
		Topic:             name,
		NumPartitions:     c.Partitions,
		ReplicationFactor: c.ReplicationFactor,
		ConfigEntries:     []kafkago.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: c.CleanupPolicy}},
	}}})
	s.observe(err)
	if err != nil {
		return fmt.Errorf("kafka: create topic %s: %w", name, err)
	}
	if err := res.Errors[name]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
		return fmt.Errorf("kafka: create topic %s: %w", name, err)
	}
	s.log.Info("created Kafka topic", "topic", name, "partitions", c.Partitions,
		"replicationFactor", c.ReplicationFactor, "cleanupPolicy", c.CleanupPolicy)
	return nil
}
