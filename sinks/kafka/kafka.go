// Package kafka is the sink that produces CloudEvents to Apache Kafka with
// github.com/segmentio/kafka-go.
//
// Records follow the CloudEvents Kafka protocol binding: binary mode (the
// default) puts every attribute in a ce_ header and datacontenttype in
// content-type; structured mode puts the JSON event in the value. The key is
// the partitionkey extension, and the partition is chosen from it with the
// configured balancer (murmur2 by default, as Java's producer does), so all
// changes of one object share a partition and keep their order.
//
// Ordering is the reason this adapter does not use kafka-go's Writer: the
// Writer queues a batch internally and may still send it after WriteMessages
// has returned on a cancelled context (segmentio/kafka-go#1427). When the
// dispatcher then retries, the stale copy can land after newer changes of the
// same object. Instead each partition has one loop that owns its produce
// requests (Client.Produce with an explicit partition): at most one request is
// in flight per partition, a request once sent is always waited for until
// the broker answers or its deadline closes the connection, and a record
// still waiting in the queue is withdrawn, never sent, when its Write gives
// up. docs/sinks/kafka.md is the user's guide.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/metrics"
	"github.com/kubewire/kubewire/internal/tlsfiles"
	"github.com/kubewire/kubewire/sinks"
)

// Type is the config `type` of this sink.
const Type = config.SinkTypeKafka

// Register adds the Kafka sink to r.
func Register(r sinks.Registry) { r[Type] = New }

// partitionsMaxAge is how long a topic's partition count is trusted before
// it is read again (from kafka-go's metadata cache, so it is cheap). Growing
// a topic remaps keys, in Java as here; this bounds how long kubewire keeps
// using the old count.
const partitionsMaxAge = 30 * time.Second

// Sink produces to Kafka. It is safe for the concurrent Writes of several
// dispatcher shards.
type Sink struct {
	name        string
	cfg         config.KafkaSink
	log         *slog.Logger
	structured  bool
	tombstones  bool
	idempotent  bool
	acks        kafkago.RequiredAcks
	compression kafkago.Compression
	balancer    kafkago.Balancer

	// life ends when the sink closes; it stops the partition loops.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu        sync.Mutex
	transport *kafkago.Transport
	client    *kafkago.Client
	topics    map[string]*topic
	sources   map[string]string // CloudEvent source -> topic
	closed    bool
	// spare is the producer id Connect got to check that the principal
	// may produce idempotently; the first partition to need one takes it.
	spare producer

	ackedMu sync.Mutex
	acked   map[ackKey]struct{}
	// nAcked is len(acked), so that Writes skip the lock while nothing has
	// failed.
	nAcked atomic.Int64

	// link is the connection state reported to the dispatcher (health.go);
	// watching says the probe runs, every probeEvery (probeInterval, but
	// shorter in tests).
	link       link
	watching   bool
	probeEvery time.Duration
}

var _ sinks.Sink = (*Sink)(nil)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("kafka: sink is closed")

// New is the sinks.Factory of the Kafka sink. Nothing connects until
// Connect.
func New(cfg config.Sink, deps sinks.Deps) (sinks.Sink, error) {
	if cfg.Kafka == nil {
		return nil, errors.New("kafka: the sink has no kafka block")
	}
	c := cfg.Kafka.Defaulted()
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		name:       cfg.Name,
		cfg:        c,
		log:        log.With("sink", cfg.Name, "type", Type),
		structured: c.ContentMode == config.ContentModeStructured,
		tombstones: *c.Tombstones,
		idempotent: *c.Idempotent,
		topics:     map[string]*topic{},
		sources:    map[string]string{},
		acked:      map[ackKey]struct{}{},
		probeEvery: probeInterval,
	}
	s.link.start = time.Now()
	switch c.Acks {
	case config.KafkaAcksAll:
		s.acks = kafkago.RequireAll
	case config.KafkaAcksLeader:
		s.acks = kafkago.RequireOne
	case config.KafkaAcksNone:
		s.acks = kafkago.RequireNone
	default:
		return nil, fmt.Errorf("kafka: unknown acks %q", c.Acks)
	}
	switch c.Compression {
	case config.KafkaCompressionNone:
	case config.KafkaCompressionGzip:
		s.compression = kafkago.Gzip
	case config.KafkaCompressionSnappy:
		s.compression = kafkago.Snappy
	case config.KafkaCompressionLz4:
		s.compression = kafkago.Lz4
	case config.KafkaCompressionZstd:
		s.compression = kafkago.Zstd
	default:
		return nil, fmt.Errorf("kafka: unknown compression %q", c.Compression)
	}
	var err error
	if s.balancer, err = NewBalancer(c.Balancer); err != nil {
		return nil, err
	}
	s.life, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// NewBalancer returns the kafka-go balancer of a config balancer name. All of
// them hash the key; Consistent makes an empty key hash too rather than go
// to a random partition.
func NewBalancer(name string) (kafkago.Balancer, error) {
	switch name {
	case config.KafkaBalancerMurmur2:
		return kafkago.Murmur2Balancer{Consistent: true}, nil
	case config.KafkaBalancerCRC32:
		return kafkago.CRC32Balancer{Consistent: true}, nil
	case config.KafkaBalancerHash:
		return &kafkago.Hash{}, nil
	}
	return nil, fmt.Errorf("kafka: unknown balancer %q", name)
}

// Connect builds the client and checks that the brokers answer (and accept
// the credentials). A fixed topic is looked up, and created if configured,
// so a missing topic is reported before the first change. A failure is
// counted in kubewire_sink_connect_failures_total by reason. The first
// success starts the connection probe (health.go).
func (s *Sink) Connect(ctx context.Context) error {
	err := s.connect(ctx)
	if err != nil && !errors.Is(err, ErrClosed) {
		metrics.SinkConnectFailures.WithLabelValues(s.name, connectReason(err)).Inc()
	}
	if err == nil {
		s.observe(nil)
		s.startWatching()
	}
	return err
}

func (s *Sink) connect(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.client == nil {
		tr, err := s.newTransport()
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.transport = tr
		s.client = &kafkago.Client{Addr: kafkago.TCP(s.cfg.Brokers...), Transport: tr}
	}
	client := s.client
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout.Duration)
	defer cancel()
	if _, err := client.Metadata(ctx, &kafkago.MetadataRequest{}); err != nil {
		s.observe(err)
		// kafka-go's SASL error names neither the mechanism nor the user, and
		// those are what an operator checks first. The user name is not a
		// secret; the password is never part of the message.
		how := ""
		if sc := s.cfg.SASL; sc != nil {
			how = fmt.Sprintf(" with SASL %s as user %q", sc.Mechanism, sc.Username)
		}
		if tlsfiles.IsPeerAlert(err) && (s.cfg.TLS == nil || s.cfg.TLS.CertFile == "") {
			how += " (the broker ended the TLS handshake, and no client certificate is configured: tls.certFile and tls.keyFile)"
		}
		return fmt.Errorf("kafka: connect to %s%s: %w", strings.Join(s.cfg.Brokers, ","), how, err)
	}
	if !strings.Contains(s.cfg.Topic, "{") {
		if _, err := s.partitions(ctx, s.cfg.Topic); err != nil {
			return err
		}
	}
	if s.idempotent {
		s.mu.Lock()
		have := s.spare.valid
		s.mu.Unlock()
		if !have {
			pr, err := s.newProducerID(ctx)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.spare = pr
			s.mu.Unlock()
		}
	}
	return nil
}

// newTransport turns the config into a kafka-go Transport. The SASL password
// is read here, from its file or environment variable; it is never logged
// and errors name only where it was looked for.
func (s *Sink) newTransport() (*kafkago.Transport, error) {
	tr := &kafkago.Transport{
		ClientID:    s.cfg.ClientID,
		DialTimeout: s.cfg.DialTimeout.Duration,
		// Leader changes are noticed within this; the default is 6s.
		MetadataTTL: 2 * time.Second,
	}
	if t := s.cfg.TLS; t != nil {
		tc, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		tr.TLS = tc
	}
	if sc := s.cfg.SASL; sc != nil {
		m, err := saslMechanism(sc)
		if err != nil {
			return nil, err
		}
		tr.SASL = m
	}
	return tr, nil
}

func tlsConfig(t *config.KafkaTLS) (*tls.Config, error) {
	return tlsfiles.Config("kafka", tlsfiles.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify})
}

func saslMechanism(c *config.KafkaSASL) (sasl.Mechanism, error) {
	var password string
	switch {
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: sasl.passwordFile: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	case c.PasswordEnv != "":
		v, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			return nil, fmt.Errorf("kafka: sasl.passwordEnv: environment variable %s is not set", c.PasswordEnv)
		}
		password = v
	}
	switch c.Mechanism {
	case config.KafkaSASLPlain:
		return plain.Mechanism{Username: c.Username, Password: password}, nil
	case config.KafkaSASLScramSHA256, config.KafkaSASLScramSHA512:
		algo := scram.SHA256
		if c.Mechanism == config.KafkaSASLScramSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.Username, password)
		if err != nil {
			return nil, fmt.Errorf("kafka: sasl %s: %w", c.Mechanism, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka: unknown sasl mechanism %q", c.Mechanism)
}

// Close stops the partition loops and closes the connections. Write must
// not be running (the dispatcher guarantees it), so no request is in flight.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	tr := s.transport
	s.mu.Unlock()
	s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("kafka: close: %w", ctx.Err())
	}
	if tr != nil {
		tr.CloseIdleConnections()
	}
	return nil
}

// Record kinds, for metrics.
const (
	kindEvent     = "event"
	kindTombstone = "tombstone"
	kindMarker    = "marker"
)

// record is one Kafka record before it is handed to kafka-go. kafka-go's
// Record values are readers that a request consumes, so a fresh one is built
// for every attempt.
type record struct {
	key, value []byte
	headers    []kafkago.Header
	time       time.Time
	kind       string
	ev         *event.Event // nil for a tombstone
	// src is the event the record stands for (a tombstone's is its delete),
	// and with the partition and kind it names the record in Sink.acked.
	src *event.Event
	// object is the partition key as a string, for an event's record.
	object string
}

func (r *record) size() int {
	n := len(r.key) + len(r.value) + 32
	for _, h := range r.headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}

func (s *Sink) newRecord(ev *event.Event) (record, error) {
	m, err := EncodeMessage(ev, s.structured)
	if err != nil {
		return record{}, err
	}
	kind := kindEvent
	if isMarker(ev) {
		kind = kindMarker
	}
	object, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	return record{key: m.Key, value: m.Value, headers: m.Headers, time: ev.Time(), kind: kind, ev: ev, src: ev, object: object}, nil
}

// ackKey names one record of one event in one partition.
type ackKey struct {
	ev   *event.Event
	p    *partition
	kind string
}

// Records acknowledged by a Write that failed as a whole are remembered
// until the dispatcher's retry of that Write succeeds, and the retry does
// not send them again. A retry then starts at the first record whose fate
// is unknown, so a repeated event directly follows its first copy in its
// object's sequence, instead of the whole Write appearing twice
// (v1 v2 v1 v2). The dispatcher retries the same events, so the event
// pointers identify them.
func (s *Sink) isAcked(k ackKey) bool {
	if s.nAcked.Load() == 0 {
		return false
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	_, ok := s.acked[k]
	return ok
}

// remember records what a failed Write got acknowledged.
func (s *Sink) remember(keys []ackKey) {
	if len(keys) == 0 {
		return
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	for _, k := range keys {
		s.acked[k] = struct{}{}
	}
	s.nAcked.Store(int64(len(s.acked)))
}

// forget drops what a Write that has now succeeded had remembered.
func (s *Sink) forget(keys []ackKey) {
	if len(keys) == 0 {
		return
	}
	s.ackedMu.Lock()
	defer s.ackedMu.Unlock()
	for _, k := range keys {
		delete(s.acked, k)
	}
	s.nAcked.Store(int64(len(s.acked)))
}

func isMarker(ev *event.Event) bool {
	t := ev.Type()
	return t == encoding.TypeSnapshotStarted || t == encoding.TypeSnapshotCompleted
}

// group is the part of one Write that goes to one partition, in order.
type group struct {
	p       *partition
	records []record
}

// Write produces events in order and returns once Kafka acknowledged all of
// them. An object's event goes to its key's partition, followed by a
// tombstone if it is a delete and tombstones are on; a snapshot marker goes
// to every partition of its topic, so a consumer of any one partition sees
// the snapshot's frame.
func (s *Sink) Write(ctx context.Context, events []*event.Event) error {
	s.mu.Lock()
	closed := s.closed || s.client == nil
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: write before Connect or after Close: %w", ErrClosed)
	}
	var groups []*group
	var done []ackKey // what this Write had acknowledged before
	index := map[*partition]*group{}
	add := func(p *partition, r record) {
		if k := (ackKey{r.src, p, r.kind}); s.isAcked(k) {
			done = append(done, k)
			return
		}
		g := index[p]
		if g == nil {
			g = &group{p: p}
			index[p] = g
			groups = append(groups, g)
		}
		g.records = append(g.records, r)
	}
	for _, ev := range events {
		name, err := s.topicFor(ev)
		if err != nil {
			return sinks.Permanent(err)
		}
		t, err := s.partitions(ctx, name)
		if err != nil {
			return err
		}
		r, err := s.newRecord(ev)
		if err != nil {
			return sinks.Permanent(err)
		}
		if r.kind == kindMarker {
			for _, p := range t.parts {
				add(p, r)
			}
			continue
		}
		p := t.parts[s.balancer.Balance(kafkago.Message{Key: r.key}, t.ids...)]
		add(p, r)
		if s.tombstones && ev.Type() == encoding.TypeDeleted {
			add(p, record{key: r.key, time: r.time, kind: kindTombstone, src: ev})
		}
	}
	if acked, err := s.send(ctx, groups); err != nil {
		s.remember(acked)
		return err
	}
	s.forget(done)
	return nil
}

// send hands every group to its partition's loop and waits for all of them.
// A group the broker refused as too large is sent again record by record, so
// that only the oversized events fall back to a reference payload. It
// returns what the broker acknowledged, which matters only if it fails.
func (s *Sink) send(ctx context.Context, groups []*group) ([]ackKey, error) {
	units := make([]*unit, len(groups))
	for i, g := range groups {
		units[i] = newUnit(g.records)
		g.p.submit(units[i])
	}
	var errs []error
	var acked []ackKey
	var tooLarge []int
	for i, u := range units {
		err := u.wait(ctx)
		// sent is the unit's acknowledged prefix, set before its outcome
		// was reported (0 if it was withdrawn).
		for _, r := range groups[i].records[:u.sent] {
			acked = append(acked, ackKey{r.src, groups[i].p, r.kind})
		}
		switch {
		case err == nil:
		case isTooLarge(err):
			tooLarge = append(tooLarge, i)
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return acked, errors.Join(errs...)
	}
	for _, i := range tooLarge {
		if err := s.sendOneByOne(ctx, groups[i], units[i].sent, &acked); err != nil {
			errs = append(errs, err)
		}
	}
	return acked, errors.Join(errs...)
}

// sendOneByOne sends g's records after the first skip (which went out
// already) one request each, in order, adding each acknowledged one to
// acked. An event that is too large on its own is replaced by its reference
// event; if even that is refused, the rest of the group is not sent and the
// error is permanent, so the dispatcher drops only that event and sends the
// rest again.
func (s *Sink) sendOneByOne(ctx context.Context, g *group, skip int, acked *[]ackKey) error {
	for _, r := range g.records[skip:] {
		u := newUnit([]record{r})
		g.p.submit(u)
		err := u.wait(ctx)
		if err == nil || !isTooLarge(err) || r.ev == nil {
			if err != nil {
				return err
			}
			*acked = append(*acked, ackKey{r.src, g.p, r.kind})
			continue
		}
		ref, rerr := encoding.ReferenceEvent(r.ev)
		if rerr != nil {
			return sinks.Permanent(rerr)
		}
		rr, rerr := s.newRecord(ref)
		if rerr != nil {
			return sinks.Permanent(rerr)
		}
		rr.src = r.src
		u = newUnit([]record{rr})
		g.p.submit(u)
		rerr = u.wait(ctx)
		switch {
		case rerr == nil:
			*acked = append(*acked, ackKey{r.src, g.p, r.kind})
			metrics.KafkaOversized.WithLabelValues(s.name, "reference").Inc()
			s.log.Warn("event too large for Kafka; sent a reference to the object instead",
				"id", r.ev.ID(), "partitionkey", string(r.key), "topic", g.p.topic, "bytes", r.size(), "err", err)
		case isTooLarge(rerr):
			metrics.KafkaOversized.WithLabelValues(s.name, "dropped").Inc()
			return sinks.Permanent(fmt.Errorf("kafka: event %s is too large for topic %s even as a reference (%d bytes): %w",
				r.ev.ID(), g.p.topic, rr.size(), rerr))
		default:
			return rerr
		}
	}
	return nil
}

func isTooLarge(err error) bool {
	return errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge)
}

// topicFor expands the topic template for the event's resource, which it
// reads from the event's source: /clusters/<c>/api/<v>/<r> or
// /clusters/<c>/apis/<g>/<v>/<r>. Sources repeat, so the result is cached.
func (s *Sink) topicFor(ev *event.Event) (string, error) {
	src := ev.Source()
	s.mu.Lock()
	t, ok := s.sources[src]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	parts := strings.Split(strings.TrimPrefix(src, "/"), "/")
	var cluster, group, version, resource string
	switch {
	case len(parts) == 5 && parts[0] == "clusters" && parts[2] == "api":
		cluster, version, resource = parts[1], parts[3], parts[4]
	case len(parts) == 6 && parts[0] == "clusters" && parts[2] == "apis":
		cluster, group, version, resource = parts[1], parts[3], parts[4], parts[5]
	default:
		return "", fmt.Errorf("kafka: event %s: source %q is not a kubewire resource source", ev.ID(), src)
	}
	t = config.KafkaTopic(s.cfg.Topic, cluster, group, version, resource)
	if why := config.ValidateKafkaTopicName(t); why != "" {
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

// Unit states. A unit moves from queued to taken (by its partition loop,
// which then always reports an outcome) or to abandoned (by its Write,
// which gave up first); never both.
const (
	unitQueued int32 = iota
	unitTaken
	unitAbandoned
)

// unit is one Write's records for one partition. Its records are sent
// together, in order, or not at all.
type unit struct {
	records []record
	bytes   int
	state   atomic.Int32
	done    chan error
	// sent is how many of records, from the first, the broker
	// acknowledged. The partition loop sets it before it reports on done.
	sent int
}

func newUnit(records []record) *unit {
	u := &unit{records: records, done: make(chan error, 1)}
	for i := range records {
		u.bytes += records[i].size()
	}
	return u
}

// wait returns the unit's outcome. If ctx ends while the unit is still
// queued, it is withdrawn; once its request is on the wire, wait keeps
// waiting for the outcome (bounded by requestTimeout), because returning
// early would let the request land after the dispatcher moved on.
func (u *unit) wait(ctx context.Context) error {
	select {
	case err := <-u.done:
		return err
	case <-ctx.Done():
		if u.state.CompareAndSwap(unitQueued, unitAbandoned) {
			return fmt.Errorf("kafka: withdrawn before it was sent: %w", ctx.Err())
		}
		return <-u.done
	}
}

// partition owns the produce requests of one topic partition.
type partition struct {
	s     *Sink
	topic string
	id    int

	mu    sync.Mutex
	queue []*unit
	wake  chan struct{}

	// producer, objects (the objects in the request being built), pending
	// and resolved are used by run's goroutine only.
	producer producer
	objects  map[string]struct{}
	// pending is the request whose outcome is not known yet; it goes out
	// again, unchanged, before anything else (see idempotent.go).
	pending *pending
	// resolved are records that went out in a resent pending request,
	// until the retried Write that holds them reaches the loop.
	resolved map[recordKey]struct{}
}

func (p *partition) submit(u *unit) {
	p.mu.Lock()
	p.queue = append(p.queue, u)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run sends the queued units, one request at a time, until the sink closes.
func (p *partition) run(ctx context.Context) {
	defer p.s.wg.Done()
	for {
		batch := p.next(ctx)
		if batch == nil {
			p.drain(ctx.Err())
			return
		}
		p.send(batch)
	}
}

// next waits for units and takes as many as fit in one request, waiting up
// to linger for more once it has the first. It returns nil when ctx ends.
func (p *partition) next(ctx context.Context) []*unit {
	b := p.s.cfg.Batch
	var out []*unit
	var n, size int
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for {
		full := false
		p.mu.Lock()
		for len(p.queue) > 0 {
			u := p.queue[0]
			if len(out) > 0 && (n+len(u.records) > b.MaxMessages || size+u.bytes > b.MaxBytes) {
				full = true
				break
			}
			p.queue[0] = nil
			p.queue = p.queue[1:]
			if !u.state.CompareAndSwap(unitQueued, unitTaken) {
				continue // withdrawn by its Write
			}
			out = append(out, u)
			n += len(u.records)
			size += u.bytes
		}
		p.mu.Unlock()
		if len(out) > 0 && (full || b.Linger.Duration == 0 || n >= b.MaxMessages || size >= b.MaxBytes) {
			return out
		}
		var expired <-chan time.Time
		if len(out) > 0 {
			if linger == nil {
				linger = time.NewTimer(b.Linger.Duration)
			}
			expired = linger.C
		}
		select {
		case <-p.wake:
		case <-expired:
			return out
		case <-ctx.Done():
			for _, u := range out {
				u.done <- fmt.Errorf("kafka: sink closed: %w", ctx.Err())
			}
			return nil
		}
	}
}

// drain fails every unit still queued when the sink closes.
func (p *partition) drain(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, u := range q {
		if u.state.CompareAndSwap(unitQueued, unitTaken) {
			u.done <- fmt.Errorf("kafka: sink closed: %w", err)
		}
	}
}

// send produces the units' records, in order, in as few requests as the
// batch limits allow, one after the other; the first failure stops it. A
// request whose outcome is still unknown from an earlier round goes first,
// unchanged, and records it got acknowledged are not sent again (see
// partition.resend). A request never holds two events of one object: if a
// request whose answer is lost was appended after all and cannot be resent
// unchanged, the Write's retry then repeats at most one event of each
// object. A unit whose records all went out succeeds even if a later
// request failed, and each unit says how much of it went out (see
// Sink.remember).
func (p *partition) send(batch []*unit) {
	b := p.s.cfg.Batch
	type item struct {
		r record
		u int
	}
	var items []item
	var err error
	if p.pending != nil {
		err = p.resend()
	}
	p.skipResolved(batch)
	for i, u := range batch {
		for _, r := range u.records[u.sent:] {
			items = append(items, item{r, i})
		}
	}
	keys := p.objects
	for len(items) > 0 && err == nil {
		clear(keys)
		n, size := 0, 0
		for n < len(items) && n < b.MaxMessages && (n == 0 || size+items[n].r.size() <= b.MaxBytes) {
			if r := &items[n].r; r.kind == kindEvent {
				if _, dup := keys[r.object]; dup {
					break
				}
				keys[r.object] = struct{}{}
			}
			size += items[n].r.size()
			n++
		}
		rs := make([]record, n)
		for i := range rs {
			rs[i] = items[i].r
		}
		if err = p.produce(rs); err == nil {
			for _, it := range items[:n] {
				batch[it.u].sent++
			}
		}
		items = items[n:]
	}
	for _, u := range batch {
		if u.sent == len(u.records) {
			u.done <- nil
		} else {
			u.done <- err
		}
	}
}

// produce sends one request and waits for its answer. Its context is not
// the Write's: a request on the wire is always seen through to the broker's
// answer or to the deadline, which closes the connection under it. kafka-go
// gives the broker half the deadline, so normally the broker answers first.
func (p *partition) produce(rs []record) error {
	s := p.s
	recs := make([]kafkago.Record, len(rs))
	for i := range rs {
		r := &rs[i]
		recs[i] = kafkago.Record{Time: r.time, Key: kafkago.NewBytes(r.key), Headers: r.headers}
		if r.value != nil {
			recs[i].Value = kafkago.NewBytes(r.value)
		}
	}
	if s.idempotent {
		return p.produceIdempotent(rs, recs)
	}
	return p.roundTrip(rs, func(ctx context.Context) (*kafkago.ProduceResponse, error) {
		return s.client.Produce(ctx, &kafkago.ProduceRequest{
			Topic:        p.topic,
			Partition:    p.id,
			RequiredAcks: s.acks,
			Records:      kafkago.NewRecordReader(recs...),
			Compression:  s.compression,
		})
	})
}

// roundTrip makes one produce request for rs, bounded by requestTimeout,
// and counts it. A duplicate-sequence answer is a success: the broker holds
// the batch from an earlier copy.
func (p *partition) roundTrip(rs []record, do func(context.Context) (*kafkago.ProduceResponse, error)) error {
	s := p.s
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout.Duration)
	defer cancel()
	start := time.Now()
	res, err := do(ctx)
	metrics.ObserveKafkaProduce(s.name, time.Since(start).Seconds())
	if err == nil && res != nil && res.Error != nil && !errors.Is(res.Error, kafkago.DuplicateSequenceNumber) {
		err = res.Error
	}
	s.observe(err)
	if err != nil {
		metrics.KafkaProduceRequests.WithLabelValues(s.name, outcome(err)).Inc()
		return fmt.Errorf("kafka: produce %d records to %s[%d]: %w", len(rs), p.topic, p.id, err)
	}
	metrics.KafkaProduceRequests.WithLabelValues(s.name, "ok").Inc()
	metrics.KafkaBatchRecords.WithLabelValues(s.name).Observe(float64(len(rs)))
	var events, tombstones, markers int
	for i := range rs {
		switch rs[i].kind {
		case kindEvent:
			events++
		case kindTombstone:
			tombstones++
		case kindMarker:
			markers++
		}
	}
	metrics.KafkaRecords.WithLabelValues(s.name, kindEvent).Add(float64(events))
	metrics.KafkaRecords.WithLabelValues(s.name, kindTombstone).Add(float64(tombstones))
	metrics.KafkaRecords.WithLabelValues(s.name, kindMarker).Add(float64(markers))
	return nil
}

// connectReason sorts a Connect error into the reasons of
// kubewire_sink_connect_failures_total.
func connectReason(err error) string {
	for _, auth := range []error{kafkago.SASLAuthenticationFailed, kafkago.UnsupportedSASLMechanism,
		kafkago.IllegalSASLState, kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed} {
		if errors.Is(err, auth) {
			return metrics.ConnectAuth
		}
	}
	if tlsfiles.IsTLSError(err) {
		return metrics.ConnectTLS
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return metrics.ConnectNetwork
	}
	return metrics.ConnectOther
}

// outcome names err for a metric label from a bounded set.
func outcome(err error) string {
	var ke kafkago.Error
	if errors.As(err, &ke) {
		return strings.ToLower(strings.NewReplacer(" ", "_", "-", "_").Replace(ke.Title()))
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return "network"
	}
	return "other"
}
