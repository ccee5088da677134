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
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/tlsfiles"
	"github.com/kubewire/kubewire/sinks"
)

// Type is the config `type` of this sink.
const Type = "kafka"

// Spec is the Kafka sink type.
var Spec = sinks.NewSpec(Type, schema, New)

// schema is the JSON Schema of the kafka block, for the Helm chart.
//
//go:embed schema.json
var schema string

// Sink produces to Kafka. It is safe for the concurrent Writes of several
// dispatcher shards.
type Sink struct {
	name        string
	seriesOnce  sync.Once
	m           *series
	cfg         Config
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
	// produceConns carry the idempotent producer's requests
	// (produceconn.go), and produce is where they go: produceConns, or a
	// test's broker. Both are set with client.
	produceConns *produceConns
	produce      rawProducer
	topics       map[string]*topic
	sources      map[string]string // CloudEvent source -> topic
	closed       bool
	// spare is the producer id Connect got to check that the principal
	// may produce idempotently; the first partition to need one takes it.
	spare producer

	// link is the connection state reported to the dispatcher (health.go);
	// watching says the probe runs, every probeEvery (probeInterval, but
	// shorter in tests).
	link       link
	watching   bool
	probeEvery time.Duration

	// placed holds the partitions that took a record of an event whose
	// Write failed: a marker that failed elsewhere, a delete whose
	// tombstone failed (placed.go).
	placed placedRecords
}

var _ sinks.Sink = (*Sink)(nil)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("kafka: sink is closed")

// New builds a Kafka sink from its block, defaulted here for a block built in code. Nothing connects until
// Connect.
func New(name string, cfg *Config, deps sinks.Deps) (sinks.Sink, error) {
	// A sink built without the registry of sink types (a program that
	// uses this package alone) still exports its metrics.
	metrics.Register(cfg.Collectors()...)
	c := cfg.Defaulted()
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{
		name:       name,
		cfg:        c,
		log:        log.With("sink", name, "type", Type),
		structured: c.ContentMode == config.ContentModeStructured,
		tombstones: *c.Tombstones,
		idempotent: *c.Idempotent,
		topics:     map[string]*topic{},
		sources:    map[string]string{},
		probeEvery: probeInterval,
	}
	s.link.start = time.Now()
	var ok bool
	if s.acks, ok = requiredAcks[c.Acks]; !ok {
		return nil, fmt.Errorf("kafka: unknown acks %q", c.Acks)
	}
	if s.compression, ok = compressions[c.Compression]; !ok {
		return nil, fmt.Errorf("kafka: unknown compression %q", c.Compression)
	}
	var err error
	if s.balancer, err = NewBalancer(c.Balancer); err != nil {
		return nil, err
	}
	s.life, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// requiredAcks and compressions are kafka-go's values of the acks and
// compression settings; no compression is kafka-go's zero codec.
var (
	requiredAcks = map[string]kafkago.RequiredAcks{
		AcksAll:    kafkago.RequireAll,
		AcksLeader: kafkago.RequireOne,
		AcksNone:   kafkago.RequireNone,
	}
	compressions = map[string]kafkago.Compression{
		CompressionNone:   0,
		CompressionGzip:   kafkago.Gzip,
		CompressionSnappy: kafkago.Snappy,
		CompressionLz4:    kafkago.Lz4,
		CompressionZstd:   kafkago.Zstd,
	}
)

// NewBalancer returns the kafka-go balancer of a config balancer name. All of
// them hash the key; Consistent makes an empty key hash too rather than go
// to a random partition.
func NewBalancer(name string) (kafkago.Balancer, error) {
	switch name {
	case BalancerMurmur2:
		return kafkago.Murmur2Balancer{Consistent: true}, nil
	case BalancerCRC32:
		return kafkago.CRC32Balancer{Consistent: true}, nil
	case BalancerHash:
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
		s.produceConns = newProduceConns(s.client, tr)
		s.produce = s.produceConns
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

// Close stops the partition loops and closes the connections. Write must
// not be running (the dispatcher guarantees it), so no request is in flight.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	tr, pcs := s.transport, s.produceConns
	s.mu.Unlock()
	s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("kafka: close: %w", ctx.Err())
	}
	// Records of events whose retry never came: the next process writes
	// those events again, whole.
	s.possibleDuplicates(dupClosed, s.placed.records())
	if tr != nil {
		tr.CloseIdleConnections()
	}
	if pcs != nil {
		pcs.close()
	}
	return nil
}
