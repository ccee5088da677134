package kafka

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding/template"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// Kafka balancers: how a record's key picks its partition. Every one of them
// is a pure function of the key, because per-object order in Kafka is
// per-partition order and an object must always land in the same partition.
const (
	// BalancerMurmur2 is Java's default partitioner for keyed records
	// (toPositive(murmur2(key)) % partitions), so Java producers and
	// consumers agree with kubewire on where a key lives.
	BalancerMurmur2 = "murmur2"
	// BalancerCRC32 is librdkafka's "consistent" partitioner.
	BalancerCRC32 = "crc32"
	// BalancerHash is FNV-1a, the default of sarama's hash partitioner.
	BalancerHash = "hash"
)

// Kafka acknowledgement levels.
const (
	// AcksAll waits until every in-sync replica has the record: the
	// only level at which an acknowledged change survives losing the leader.
	AcksAll = "all"
	// AcksLeader waits for the leader only.
	AcksLeader = "leader"
	// AcksNone does not wait at all: delivery becomes at most once.
	AcksNone = "none"
)

// Kafka compression codecs.
const (
	CompressionNone   = "none"
	CompressionGzip   = "gzip"
	CompressionSnappy = "snappy"
	CompressionLz4    = "lz4"
	CompressionZstd   = "zstd"
)

// Kafka SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Kafka cleanup policies of topics kubewire creates.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// Kafka defaults and limits. docs/sinks/kafka.md explains them.
const (
	DefaultTopic = "k8s.{group}.{resource}"
	// CoreGroup stands for the core API group ("") in topic names,
	// which cannot hold an empty segment.
	CoreGroup = "core"
	// DefaultBatchMaxMessages bounds one produce request per partition.
	DefaultBatchMaxMessages = 1000
	// DefaultBatchMaxBytes bounds the record values and keys of one
	// produce request per partition. It stays well under the broker's
	// default max.message.bytes (1 MiB), which applies to a whole record
	// batch, so ordinary batches are never refused for their size.
	DefaultBatchMaxBytes = 512 << 10
	// DefaultBatchLinger is how long a partition waits for more records
	// before it sends what it has. kafka-go's own default (1s) would add a
	// second to every change; Java's producer defaults to 5ms since 4.0.
	DefaultBatchLinger = 5 * time.Millisecond
	MaxBatchLinger     = 10 * time.Second
	// DefaultRequestTimeout bounds one produce round trip. The leader
	// waits at most brokerAckTimeout of it for its followers, so the
	// broker answers before we give up.
	DefaultRequestTimeout = 30 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	// MaxTopicLength is Kafka's limit on a topic name.
	MaxTopicLength = 249
	// DefaultPartitions and DefaultReplicationFactor are -1:
	// the broker's num.partitions and default.replication.factor.
	DefaultPartitions        = -1
	DefaultReplicationFactor = -1
)

// TopicPlaceholders lists the placeholders a topic template may use,
// each written in braces: {resource}.
func TopicPlaceholders() []string {
	return []string{"cluster", "group", "version", "resource"}
}

// Config configures a sink of type "kafka". Zero values mean the
// documented default; Defaulted returns a copy with them filled in.
type Config struct {
	// Brokers lists bootstrap brokers as host:port. Required.
	Brokers []string `json:"brokers"`
	// Topic is the topic, or a template with placeholders from
	// TopicPlaceholders that expands per resource. Default
	// DefaultTopic.
	Topic string `json:"topic,omitempty"`
	// ContentMode is "binary" (default) or "structured".
	ContentMode string `json:"contentMode,omitempty"`
	// Balancer picks a key's partition: "murmur2" (default), "crc32" or
	// "hash". Key-less balancers (round robin, least bytes) are not offered:
	// they would scatter an object's changes over partitions and lose its
	// order.
	Balancer string `json:"balancer,omitempty"`
	// Acks is "all" (default), "leader" or "none".
	Acks string `json:"acks,omitempty"`
	// Compression is "none" (default), "gzip", "snappy", "lz4" or "zstd".
	Compression string `json:"compression,omitempty"`
	// Batch bounds the produce requests of each partition.
	Batch *Batch `json:"batch,omitempty"`
	// ClientID is the client.id the brokers see (quotas, logs). Default
	// "kubewire".
	ClientID string `json:"clientId,omitempty"`
	// Idempotent makes kubewire an idempotent Kafka producer: every batch
	// carries a producer id, an epoch and sequence numbers, and kubewire
	// moves to a new epoch before it retries a failed batch, so the broker
	// refuses a stale copy of that batch that arrives late. Without it, a
	// request kubewire gave up on (a timeout while the broker restarts) can
	// still be appended after its retry and after newer changes of the same
	// object. Default true when acks is "all"; it needs acks "all".
	Idempotent *bool `json:"idempotent,omitempty"`
	// Tombstones sends a tombstone (the key, a null value) after every
	// deleted event, so a compacted topic forgets deleted objects. Default
	// true.
	Tombstones *bool `json:"tombstones,omitempty"`
	// RequestTimeout bounds one produce round trip. Default 30s.
	RequestTimeout config.Duration `json:"requestTimeout"`
	// DialTimeout bounds opening a connection to a broker. Default 10s.
	DialTimeout config.Duration `json:"dialTimeout"`
	// TLS configures TLS; setting the block turns TLS on.
	TLS *TLS `json:"tls,omitempty"`
	// SASL configures SASL authentication.
	SASL *SASL `json:"sasl,omitempty"`
	// CreateTopics, when set, creates missing topics before the first record
	// goes to them. Off by default: most clusters provision topics centrally.
	CreateTopics *CreateTopics `json:"createTopics,omitempty"`
}

// Batch bounds one produce request to one partition.
type Batch struct {
	// MaxMessages is the most records in one request. Default 1000.
	MaxMessages int `json:"maxMessages,omitempty"`
	// MaxBytes bounds the keys and values of one request. Default 512 KiB.
	// A single record larger than this still goes, alone.
	MaxBytes int `json:"maxBytes,omitempty"`
	// Linger is how long to wait for more records when they come densely;
	// a record that arrives alone is sent at once (linger.go). Default
	// 5ms; 0 sends at once always.
	Linger config.Duration `json:"linger"`
}

// TLS configures TLS to the brokers.
type TLS = config.TLS

// SASL configures SASL. The password is only ever read from a file or
// an environment variable, never written in the configuration, and never
// logged.
type SASL struct {
	// Mechanism is "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512". Required.
	Mechanism string `json:"mechanism"`
	// Username is the SASL user. Required.
	Username string `json:"username"`
	// PasswordFile or PasswordEnv (exactly one) holds the password.
	PasswordFile string `json:"passwordFile,omitempty"`
	PasswordEnv  string `json:"passwordEnv,omitempty"`
	// AllowInsecure accepts SASL without a tls block. Without TLS, PLAIN
	// sends the password in clear text, and with every mechanism the events
	// themselves cross the network unencrypted, so validation refuses it
	// unless this is true. Only for tests and trusted networks.
	AllowInsecure bool `json:"allowInsecure,omitempty"`
}

// CreateTopics is how kubewire creates topics that do not exist.
type CreateTopics struct {
	// Partitions of a new topic; -1 (default) takes the broker's
	// num.partitions.
	Partitions int `json:"partitions,omitempty"`
	// ReplicationFactor of a new topic; -1 (default) takes the broker's
	// default.replication.factor.
	ReplicationFactor int `json:"replicationFactor,omitempty"`
	// CleanupPolicy is "delete" (default) or "compact". A compacted topic
	// with tombstones on holds exactly the live objects.
	CleanupPolicy string `json:"cleanupPolicy,omitempty"`
}

// Defaulted returns a copy of k with every unset field at its default. The
// copy shares no slices or pointers with k.
func (k *Config) Defaulted() Config {
	d := *k
	d.Brokers = append([]string(nil), k.Brokers...)
	d.Topic = cmp.Or(d.Topic, DefaultTopic)
	d.ContentMode = cmp.Or(d.ContentMode, config.ContentModeBinary)
	d.Balancer = cmp.Or(d.Balancer, BalancerMurmur2)
	d.Acks = cmp.Or(d.Acks, AcksAll)
	d.Compression = cmp.Or(d.Compression, CompressionNone)
	b := config.CopyOr(k.Batch, Batch{})
	b.MaxMessages = cmp.Or(b.MaxMessages, DefaultBatchMaxMessages)
	b.MaxBytes = cmp.Or(b.MaxBytes, DefaultBatchMaxBytes)
	b.Linger.Default(DefaultBatchLinger)
	d.Batch = b
	d.ClientID = cmp.Or(d.ClientID, "kubewire")
	d.Idempotent = config.CopyOr(k.Idempotent, d.Acks == AcksAll)
	d.Tombstones = config.CopyOr(k.Tombstones, true)
	d.RequestTimeout.Default(DefaultRequestTimeout)
	d.DialTimeout.Default(DefaultDialTimeout)
	d.TLS = config.Clone(k.TLS)
	d.SASL = config.Clone(k.SASL)
	if k.CreateTopics != nil {
		c := *k.CreateTopics
		c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
		c.ReplicationFactor = cmp.Or(c.ReplicationFactor, DefaultReplicationFactor)
		c.CleanupPolicy = cmp.Or(c.CleanupPolicy, CleanupDelete)
		d.CreateTopics = &c
	}
	return d
}

// TopicName expands a topic template for one resource. The core group ""
// becomes CoreGroup. The result is not validated; see
// ValidateTopicName. A template that does not parse (config validation
// refuses it) is returned as it is.
func TopicName(tmpl, cluster, group, version, resource string) string {
	t, err := ParseTopic(tmpl)
	if err != nil {
		return tmpl
	}
	if group == "" {
		group = CoreGroup
	}
	// In the order of TopicPlaceholders.
	return t.Expand([]string{cluster, group, version, resource})
}

// ParseTopic parses a topic template: literal characters legal in a
// topic name and the placeholders of TopicPlaceholders in braces.
func ParseTopic(tmpl string) (*template.Template, error) {
	return template.Parse(tmpl, template.Rules{Placeholders: TopicPlaceholders(), Literal: func(r rune) string {
		if legalTopicRune(r) {
			return ""
		}
		return fmt.Sprintf("must hold only ASCII letters, digits, '.', '_', '-' and placeholders in braces (found %q)", r)
	}})
}

// ValidateTopicName returns why name is not a legal Kafka topic name,
// or "". Kafka allows 1 to 249 characters from [a-zA-Z0-9._-], except the
// names "." and "..".
func ValidateTopicName(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case name == "." || name == "..":
		return `must not be "." or ".."`
	case len(name) > MaxTopicLength:
		return fmt.Sprintf("must be at most %d characters (it has %d)", MaxTopicLength, len(name))
	}
	for _, r := range name {
		if !legalTopicRune(r) {
			return fmt.Sprintf("must hold only ASCII letters, digits, '.', '_' and '-' (found %q)", r)
		}
	}
	return ""
}

func legalTopicRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// validateKafkaTopicTemplate checks the template's syntax and literal
// characters; the expansions are checked per resource by
// validateKafkaTopics.
func validateKafkaTopicTemplate(p *field.Path, tmpl string) field.ErrorList {
	if _, err := ParseTopic(tmpl); err != nil {
		return field.ErrorList{field.Invalid(p, tmpl, err.Error())}
	}
	if !strings.Contains(tmpl, "{") {
		if why := ValidateTopicName(tmpl); why != "" {
			return field.ErrorList{field.Invalid(p, tmpl, why)}
		}
	}
	return nil
}

// validateKafkaSink checks the kafka block's own fields.
func validateKafkaSink(p *field.Path, k *Config) field.ErrorList {
	var errs field.ErrorList

	bp := p.Child("brokers")
	if len(k.Brokers) == 0 {
		errs = append(errs, field.Required(bp, `at least one bootstrap broker as host:port, e.g. "kafka:9092"`))
	}
	for i, b := range k.Brokers {
		errs = append(errs, validateKafkaBroker(bp.Index(i), b, k.Brokers[:i])...)
	}

	if k.Topic != "" {
		errs = append(errs, validateKafkaTopicTemplate(p.Child("topic"), k.Topic)...)
	}

	oneOf := func(name, v string, allowed ...string) {
		if v == "" {
			return
		}
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		errs = append(errs, field.NotSupported(p.Child(name), v, allowed))
	}
	oneOf("contentMode", k.ContentMode, config.ContentModeBinary, config.ContentModeStructured)
	switch k.Balancer {
	case "roundrobin", "round_robin", "leastbytes", "least_bytes", "random":
		errs = append(errs, field.Invalid(p.Child("balancer"), k.Balancer,
			`must pick the partition from the key ("murmur2", "crc32" or "hash"): a balancer that ignores the key spreads one object's changes over several partitions, and Kafka orders records only within a partition`))
	default:
		oneOf("balancer", k.Balancer, BalancerMurmur2, BalancerCRC32, BalancerHash)
	}
	oneOf("acks", k.Acks, AcksAll, AcksLeader, AcksNone)
	if k.Idempotent != nil && *k.Idempotent && k.Acks != "" && k.Acks != AcksAll {
		errs = append(errs, field.Invalid(p.Child("idempotent"), *k.Idempotent,
			fmt.Sprintf(`needs acks "all" (acks is %q): the broker can only discard a stale batch whose sequence it has fully acknowledged; set idempotent: false, or acks: all`, k.Acks)))
	}
	oneOf("compression", k.Compression, CompressionNone, CompressionGzip, CompressionSnappy,
		CompressionLz4, CompressionZstd)

	if b := k.Batch; b != nil {
		bp := p.Child("batch")
		if b.MaxMessages < 0 {
			errs = append(errs, field.Invalid(bp.Child("maxMessages"), b.MaxMessages, "must be greater than 0; omit it for the default"))
		}
		if b.MaxBytes < 0 {
			errs = append(errs, field.Invalid(bp.Child("maxBytes"), b.MaxBytes, "must be greater than 0; omit it for the default"))
		}
		lp := bp.Child("linger")
		if bad := config.ValidateDuration(lp, b.Linger); bad != nil {
			errs = append(errs, bad)
		} else if b.Linger.Duration < 0 || b.Linger.Duration > MaxBatchLinger {
			errs = append(errs, field.Invalid(lp, b.Linger.String(),
				fmt.Sprintf("must be between 0 (send at once) and %s", MaxBatchLinger)))
		}
	}

	if strings.ContainsFunc(k.ClientID, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		errs = append(errs, field.Invalid(p.Child("clientId"), k.ClientID, "must hold only printable ASCII"))
	}
	errs = append(errs, config.ValidatePositiveDuration(p.Child("requestTimeout"), k.RequestTimeout)...)
	errs = append(errs, config.ValidatePositiveDuration(p.Child("dialTimeout"), k.DialTimeout)...)

	if t := k.TLS; t != nil {
		errs = append(errs, t.Validate(p.Child("tls"))...)
	}

	if s := k.SASL; s != nil {
		errs = append(errs, validateKafkaSASL(p.Child("sasl"), s)...)
		if k.TLS == nil && !s.AllowInsecure {
			errs = append(errs, field.Required(p.Child("tls"), fmt.Sprintf(
				"SASL %s without TLS sends %s and every event in clear text; add a tls block (tls: {} uses the system roots), or set %s: true to accept that",
				saslMechanismName(s.Mechanism), saslSecretName(s.Mechanism), p.Child("sasl", "allowInsecure"))))
		}
	}

	if c := k.CreateTopics; c != nil {
		cp := p.Child("createTopics")
		if c.Partitions < -1 {
			errs = append(errs, field.Invalid(cp.Child("partitions"), c.Partitions, "must be -1 (the broker's default) or at least 1"))
		}
		if c.ReplicationFactor < -1 || c.ReplicationFactor > 32767 {
			errs = append(errs, field.Invalid(cp.Child("replicationFactor"), c.ReplicationFactor,
				"must be -1 (the broker's default) or between 1 and 32767"))
		}
		switch c.CleanupPolicy {
		case "", CleanupDelete, CleanupCompact:
		default:
			errs = append(errs, field.NotSupported(cp.Child("cleanupPolicy"), c.CleanupPolicy,
				[]string{CleanupDelete, CleanupCompact}))
		}
	}
	return errs
}

func validateKafkaBroker(p *field.Path, b string, earlier []string) field.ErrorList {
	if b == "" {
		return field.ErrorList{field.Required(p, `a broker as host:port, e.g. "kafka:9092"`)}
	}
	for _, e := range earlier {
		if e == b {
			return field.ErrorList{field.Duplicate(p, b)}
		}
	}
	if strings.Contains(b, "@") {
		// Never echo the value: it may hold a credential.
		return field.ErrorList{field.Invalid(p, field.OmitValueType{},
			"must be host:port without credentials; use sasl with passwordFile or passwordEnv")}
	}
	if strings.Contains(b, "://") {
		return field.ErrorList{field.Invalid(p, b, `must be host:port without a scheme, e.g. "kafka:9092"; use tls to turn TLS on`)}
	}
	i := strings.LastIndexByte(b, ':')
	if i <= 0 || i == len(b)-1 || strings.Trim(b[i+1:], "0123456789") != "" {
		return field.ErrorList{field.Invalid(p, b, `must be host:port, e.g. "kafka:9092"`)}
	}
	return nil
}

// saslMechanismName names the mechanism in messages, or says it is unset.
func saslMechanismName(m string) string {
	if m == "" {
		return "(no mechanism)"
	}
	return m
}

// saslSecretName says what an eavesdropper learns from the mechanism's
// handshake.
func saslSecretName(m string) string {
	if m == SASLPlain {
		return "the password"
	}
	return "the user name"
}

func validateKafkaSASL(p *field.Path, s *SASL) field.ErrorList {
	var errs field.ErrorList
	mechs := []string{SASLPlain, SASLScramSHA256, SASLScramSHA512}
	switch s.Mechanism {
	case "":
		errs = append(errs, field.Required(p.Child("mechanism"), "one of "+config.QuoteAll(mechs)))
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		errs = append(errs, field.NotSupported(p.Child("mechanism"), s.Mechanism, mechs))
	}
	if s.Username == "" {
		errs = append(errs, field.Required(p.Child("username"), "the SASL user name"))
	}
	switch {
	case s.PasswordFile == "" && s.PasswordEnv == "":
		errs = append(errs, field.Required(p.Child("passwordFile"),
			"the password comes from passwordFile or passwordEnv (passwords are never written in the configuration)"))
	case s.PasswordFile != "" && s.PasswordEnv != "":
		errs = append(errs, field.Forbidden(p.Child("passwordEnv"), "set passwordFile or passwordEnv, not both"))
	}
	if s.PasswordEnv != "" && !config.ValidEnvName(s.PasswordEnv) {
		errs = append(errs, field.Invalid(p.Child("passwordEnv"), field.OmitValueType{},
			"must be the name of an environment variable (letters, digits and '_', not starting with a digit), not the secret itself"))
	}
	return errs
}

// Default fills in every unset field; see Defaulted.
func (k *Config) Default() { *k = k.Defaulted() }

// BlockRequired says what a kafka block must hold at least: brokers have
// no default.
func (k *Config) BlockRequired() string {
	return `a kafka block with at least brokers, e.g. {brokers: ["kafka:9092"]}`
}

// Validate checks the block and, for each resource routed to the sink, the
// topic its template expands to and its keyBy.
func (k *Config) Validate(p *field.Path, routes []config.Route) field.ErrorList {
	errs := validateKafkaSink(p, k)
	errs = append(errs, validateTopics(p, k, routes)...)
	return append(errs, validateKeyByTombstones(k, routes)...)
}

// validateTopics expands the topic template for each resource that routes
// to the sink and checks the result against Kafka's rules, so that a name
// Kafka would refuse is reported before anything runs.
func validateTopics(p *field.Path, k *Config, routes []config.Route) field.ErrorList {
	tmpl := k.Topic
	if tmpl == "" {
		tmpl = DefaultTopic
	}
	tp := p.Child("topic")
	if len(validateKafkaTopicTemplate(tp, tmpl)) > 0 {
		return nil // reported by validateKafkaSink
	}
	var errs field.ErrorList
	for _, rt := range routes {
		if e := config.NoVersionPlaceholder(tp, tmpl, rt); e != nil {
			errs = append(errs, e)
		}
		r := rt.Resource
		if r.Resource == "" {
			continue
		}
		topic := TopicName(tmpl, rt.Cluster, r.Group, r.Version, r.Resource)
		if why := ValidateTopicName(topic); why != "" {
			errs = append(errs, field.Invalid(tp, tmpl, fmt.Sprintf(
				"expands to %q for %s (%s), which is not a legal Kafka topic name: it %s",
				topic, rt.Path, r.GVR().GroupResource().String(), why)))
		}
	}
	return errs
}

// validateKeyByTombstones rejects keyBy involvedObject on a resource sent to
// a sink that writes tombstones: the tombstone after one Event's delete
// would carry the involved object's key, and compaction would then drop
// every other Event about that object.
func validateKeyByTombstones(k *Config, routes []config.Route) field.ErrorList {
	if k.Tombstones != nil && !*k.Tombstones {
		return nil
	}
	var errs field.ErrorList
	for _, rt := range routes {
		if rt.Resource.KeyBy != shape.KeyByInvolvedObject {
			continue
		}
		errs = append(errs, field.Forbidden(rt.Path.Child("keyBy"), fmt.Sprintf(
			"keyBy involvedObject cannot go to Kafka sink %q with tombstones on: a tombstone keyed by the involved object would compact away every other Event about it; set tombstones: false on that sink", rt.Sink)))
	}
	return errs
}

// ExplicitZeros rejects a 0 written in the file for a field whose zero
// value means "the default": defaulting cannot tell the two apart, so an
// explicit 0 would silently become the default. batch.linger is not listed:
// its 0 is a real value.
func (k *Config) ExplicitZeros(p *field.Path, given func(*field.Path) bool) field.ErrorList {
	var errs field.ErrorList
	zero := func(fp *field.Path, v int, expect string) {
		if v == 0 && given(fp) {
			errs = append(errs, field.Invalid(fp, 0, expect))
		}
	}
	if b := k.Batch; b != nil {
		zero(p.Child("batch", "maxMessages"), b.MaxMessages,
			fmt.Sprintf("must be greater than 0; omit the field for the default (%d)", DefaultBatchMaxMessages))
		zero(p.Child("batch", "maxBytes"), b.MaxBytes,
			fmt.Sprintf("must be greater than 0; omit the field for the default (%d)", DefaultBatchMaxBytes))
	}
	if ct := k.CreateTopics; ct != nil {
		zero(p.Child("createTopics", "partitions"), ct.Partitions,
			"must be -1 (the broker's default) or at least 1")
		zero(p.Child("createTopics", "replicationFactor"), ct.ReplicationFactor,
			"must be -1 (the broker's default) or between 1 and 32767")
	}
	return errs
}

// Warnings lists valid but risky settings.
func (k *Config) Warnings(p *field.Path) []string {
	if s := k.SASL; s != nil && s.AllowInsecure && k.TLS == nil {
		return []string{fmt.Sprintf("%s: true: SASL %s runs without TLS, so %s and every event cross the network in clear text",
			p.Child("sasl", "allowInsecure"), saslMechanismName(s.Mechanism), saslSecretName(s.Mechanism))}
	}
	return nil
}

// Files lists the files the sink reads when it connects.
func (k *Config) Files(p *field.Path) []config.FileRef {
	var refs []config.FileRef
	if t := k.TLS; t != nil {
		refs = t.Files(p.Child("tls"))
	}
	if s := k.SASL; s != nil {
		refs = config.AddFile(refs, p.Child("sasl", "passwordFile"), s.PasswordFile)
	}
	return refs
}
