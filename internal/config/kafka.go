package config

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubewire/kubewire/encoding/template"
)

// SinkTypeKafka is the sink type that produces CloudEvents to Apache Kafka.
const SinkTypeKafka = "kafka"

// Kafka balancers: how a record's key picks its partition. Every one of them
// is a pure function of the key, because per-object order in Kafka is
// per-partition order and an object must always land in the same partition.
const (
	// KafkaBalancerMurmur2 is Java's default partitioner for keyed records
	// (toPositive(murmur2(key)) % partitions), so Java producers and
	// consumers agree with kubewire on where a key lives.
	KafkaBalancerMurmur2 = "murmur2"
	// KafkaBalancerCRC32 is librdkafka's "consistent" partitioner.
	KafkaBalancerCRC32 = "crc32"
	// KafkaBalancerHash is FNV-1a, the default of sarama's hash partitioner.
	KafkaBalancerHash = "hash"
)

// Kafka acknowledgement levels.
const (
	// KafkaAcksAll waits until every in-sync replica has the record: the
	// only level at which an acknowledged change survives losing the leader.
	KafkaAcksAll = "all"
	// KafkaAcksLeader waits for the leader only.
	KafkaAcksLeader = "leader"
	// KafkaAcksNone does not wait at all: delivery becomes at most once.
	KafkaAcksNone = "none"
)

// Kafka compression codecs.
const (
	KafkaCompressionNone   = "none"
	KafkaCompressionGzip   = "gzip"
	KafkaCompressionSnappy = "snappy"
	KafkaCompressionLz4    = "lz4"
	KafkaCompressionZstd   = "zstd"
)

// Kafka SASL mechanisms.
const (
	KafkaSASLPlain       = "PLAIN"
	KafkaSASLScramSHA256 = "SCRAM-SHA-256"
	KafkaSASLScramSHA512 = "SCRAM-SHA-512"
)

// Kafka cleanup policies of topics kubewire creates.
const (
	KafkaCleanupDelete  = "delete"
	KafkaCleanupCompact = "compact"
)

// Kafka defaults and limits. docs/sinks/kafka.md explains them.
const (
	DefaultKafkaTopic = "k8s.{group}.{resource}"
	// KafkaCoreGroup stands for the core API group ("") in topic names,
	// which cannot hold an empty segment.
	KafkaCoreGroup = "core"
	// DefaultKafkaBatchMaxMessages bounds one produce request per partition.
	DefaultKafkaBatchMaxMessages = 1000
	// DefaultKafkaBatchMaxBytes bounds the record values and keys of one
	// produce request per partition. It stays well under the broker's
	// default max.message.bytes (1 MiB), which applies to a whole record
	// batch, so ordinary batches are never refused for their size.
	DefaultKafkaBatchMaxBytes = 512 << 10
	// DefaultKafkaBatchLinger is how long a partition waits for more records
	// before it sends what it has. kafka-go's own default (1s) would add a
	// second to every change; Java's producer defaults to 5ms since 4.0.
	DefaultKafkaBatchLinger = 5 * time.Millisecond
	MaxKafkaBatchLinger     = 10 * time.Second
	// DefaultKafkaRequestTimeout bounds one produce round trip. kafka-go
	// gives the broker half of it, so the broker answers before we give up.
	DefaultKafkaRequestTimeout = 30 * time.Second
	DefaultKafkaDialTimeout    = 10 * time.Second
	// MaxKafkaTopicLength is Kafka's limit on a topic name.
	MaxKafkaTopicLength = 249
	// DefaultKafkaPartitions and DefaultKafkaReplicationFactor are -1:
	// the broker's num.partitions and default.replication.factor.
	DefaultKafkaPartitions        = -1
	DefaultKafkaReplicationFactor = -1
)

// KafkaTopicPlaceholders lists the placeholders a topic template may use,
// each written in braces: {resource}.
func KafkaTopicPlaceholders() []string {
	return []string{"cluster", "group", "version", "resource"}
}

// KafkaSink configures a sink of type "kafka". Zero values mean the
// documented default; Defaulted returns a copy with them filled in.
type KafkaSink struct {
	// Brokers lists bootstrap brokers as host:port. Required.
	Brokers []string `json:"brokers"`
	// Topic is the topic, or a template with placeholders from
	// KafkaTopicPlaceholders that expands per resource. Default
	// DefaultKafkaTopic.
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
	Batch *KafkaBatch `json:"batch,omitempty"`
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
	RequestTimeout Duration `json:"requestTimeout"`
	// DialTimeout bounds opening a connection to a broker. Default 10s.
	DialTimeout Duration `json:"dialTimeout"`
	// TLS configures TLS; setting the block turns TLS on.
	TLS *KafkaTLS `json:"tls,omitempty"`
	// SASL configures SASL authentication.
	SASL *KafkaSASL `json:"sasl,omitempty"`
	// CreateTopics, when set, creates missing topics before the first record
	// goes to them. Off by default: most clusters provision topics centrally.
	CreateTopics *KafkaCreateTopics `json:"createTopics,omitempty"`
}

// KafkaBatch bounds one produce request to one partition.
type KafkaBatch struct {
	// MaxMessages is the most records in one request. Default 1000.
	MaxMessages int `json:"maxMessages,omitempty"`
	// MaxBytes bounds the keys and values of one request. Default 512 KiB.
	// A single record larger than this still goes, alone.
	MaxBytes int `json:"maxBytes,omitempty"`
	// Linger is how long to wait for more records. Default 5ms; 0 sends at
	// once.
	Linger Duration `json:"linger"`
}

// KafkaTLS configures TLS to the brokers.
type KafkaTLS struct {
	// CAFile holds the PEM certificates that verify the brokers. Default:
	// the system roots.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile hold the client certificate and key, for mutual
	// TLS. Both or neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name verified in the brokers' certificates.
	ServerName string `json:"serverName,omitempty"`
	// InsecureSkipVerify turns off certificate verification. Only for
	// tests: anyone on the path can then read and forge the stream.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// KafkaSASL configures SASL. The password is only ever read from a file or
// an environment variable, never written in the configuration, and never
// logged.
type KafkaSASL struct {
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

// KafkaCreateTopics is how kubewire creates topics that do not exist.
type KafkaCreateTopics struct {
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
func (k *KafkaSink) Defaulted() KafkaSink {
	d := *k
	d.Brokers = append([]string(nil), k.Brokers...)
	if d.Topic == "" {
		d.Topic = DefaultKafkaTopic
	}
	if d.ContentMode == "" {
		d.ContentMode = ContentModeBinary
	}
	if d.Balancer == "" {
		d.Balancer = KafkaBalancerMurmur2
	}
	if d.Acks == "" {
		d.Acks = KafkaAcksAll
	}
	if d.Compression == "" {
		d.Compression = KafkaCompressionNone
	}
	b := KafkaBatch{}
	if k.Batch != nil {
		b = *k.Batch
	}
	if b.MaxMessages == 0 {
		b.MaxMessages = DefaultKafkaBatchMaxMessages
	}
	if b.MaxBytes == 0 {
		b.MaxBytes = DefaultKafkaBatchMaxBytes
	}
	if b.Linger.unset() {
		b.Linger.Duration = DefaultKafkaBatchLinger
	}
	d.Batch = &b
	if d.ClientID == "" {
		d.ClientID = "kubewire"
	}
	idem := d.Acks == KafkaAcksAll
	if k.Idempotent != nil {
		idem = *k.Idempotent
	}
	d.Idempotent = &idem
	tomb := true
	if k.Tombstones != nil {
		tomb = *k.Tombstones
	}
	d.Tombstones = &tomb
	if d.RequestTimeout.unset() {
		d.RequestTimeout.Duration = DefaultKafkaRequestTimeout
	}
	if d.DialTimeout.unset() {
		d.DialTimeout.Duration = DefaultKafkaDialTimeout
	}
	if k.TLS != nil {
		t := *k.TLS
		d.TLS = &t
	}
	if k.SASL != nil {
		s := *k.SASL
		d.SASL = &s
	}
	if k.CreateTopics != nil {
		c := *k.CreateTopics
		if c.Partitions == 0 {
			c.Partitions = DefaultKafkaPartitions
		}
		if c.ReplicationFactor == 0 {
			c.ReplicationFactor = DefaultKafkaReplicationFactor
		}
		if c.CleanupPolicy == "" {
			c.CleanupPolicy = KafkaCleanupDelete
		}
		d.CreateTopics = &c
	}
	return d
}

// KafkaTopic expands a topic template for one resource. The core group ""
// becomes KafkaCoreGroup. The result is not validated; see
// ValidateKafkaTopicName. A template that does not parse (config validation
// refuses it) is returned as it is.
func KafkaTopic(tmpl, cluster, group, version, resource string) string {
	t, err := ParseKafkaTopic(tmpl)
	if err != nil {
		return tmpl
	}
	if group == "" {
		group = KafkaCoreGroup
	}
	// In the order of KafkaTopicPlaceholders.
	return t.Expand([]string{cluster, group, version, resource})
}

// ParseKafkaTopic parses a topic template: literal characters legal in a
// topic name and the placeholders of KafkaTopicPlaceholders in braces.
func ParseKafkaTopic(tmpl string) (*template.Template, error) {
	return template.Parse(tmpl, template.Rules{Placeholders: KafkaTopicPlaceholders(), Literal: func(r rune) string {
		if legalTopicRune(r) {
			return ""
		}
		return fmt.Sprintf("must hold only ASCII letters, digits, '.', '_', '-' and placeholders in braces (found %q)", r)
	}})
}

// ValidateKafkaTopicName returns why name is not a legal Kafka topic name,
// or "". Kafka allows 1 to 249 characters from [a-zA-Z0-9._-], except the
// names "." and "..".
func ValidateKafkaTopicName(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case name == "." || name == "..":
		return `must not be "." or ".."`
	case len(name) > MaxKafkaTopicLength:
		return fmt.Sprintf("must be at most %d characters (it has %d)", MaxKafkaTopicLength, len(name))
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
	if _, err := ParseKafkaTopic(tmpl); err != nil {
		return field.ErrorList{field.Invalid(p, tmpl, err.Error())}
	}
	if !strings.Contains(tmpl, "{") {
		if why := ValidateKafkaTopicName(tmpl); why != "" {
			return field.ErrorList{field.Invalid(p, tmpl, why)}
		}
	}
	return nil
}

// validateKafkaSink checks the kafka block of a sink of type "kafka". k may
// be nil (the block was omitted), which is an error because brokers is
// required.
func validateKafkaSink(p *field.Path, k *KafkaSink) field.ErrorList {
	if k == nil {
		return field.ErrorList{field.Required(p, `a kafka block with at least brokers, e.g. {brokers: ["kafka:9092"]}`)}
	}
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
	oneOf("contentMode", k.ContentMode, ContentModeBinary, ContentModeStructured)
	switch k.Balancer {
	case "roundrobin", "round_robin", "leastbytes", "least_bytes", "random":
		errs = append(errs, field.Invalid(p.Child("balancer"), k.Balancer,
			`must pick the partition from the key ("murmur2", "crc32" or "hash"): a balancer that ignores the key spreads one object's changes over several partitions, and Kafka orders records only within a partition`))
	default:
		oneOf("balancer", k.Balancer, KafkaBalancerMurmur2, KafkaBalancerCRC32, KafkaBalancerHash)
	}
	oneOf("acks", k.Acks, KafkaAcksAll, KafkaAcksLeader, KafkaAcksNone)
	if k.Idempotent != nil && *k.Idempotent && k.Acks != "" && k.Acks != KafkaAcksAll {
		errs = append(errs, field.Invalid(p.Child("idempotent"), *k.Idempotent,
			fmt.Sprintf(`needs acks "all" (acks is %q): the broker can only discard a stale batch whose sequence it has fully acknowledged; set idempotent: false, or acks: all`, k.Acks)))
	}
	oneOf("compression", k.Compression, KafkaCompressionNone, KafkaCompressionGzip, KafkaCompressionSnappy,
		KafkaCompressionLz4, KafkaCompressionZstd)

	if b := k.Batch; b != nil {
		bp := p.Child("batch")
		if b.MaxMessages < 0 {
			errs = append(errs, field.Invalid(bp.Child("maxMessages"), b.MaxMessages, "must be greater than 0; omit it for the default"))
		}
		if b.MaxBytes < 0 {
			errs = append(errs, field.Invalid(bp.Child("maxBytes"), b.MaxBytes, "must be greater than 0; omit it for the default"))
		}
		lp := bp.Child("linger")
		if bad := validateDurationSyntax(lp, b.Linger); bad != nil {
			errs = append(errs, bad)
		} else if b.Linger.Duration < 0 || b.Linger.Duration > MaxKafkaBatchLinger {
			errs = append(errs, field.Invalid(lp, b.Linger.String(),
				fmt.Sprintf("must be between 0 (send at once) and %s", MaxKafkaBatchLinger)))
		}
	}

	if strings.ContainsFunc(k.ClientID, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		errs = append(errs, field.Invalid(p.Child("clientId"), k.ClientID, "must hold only printable ASCII"))
	}
	errs = append(errs, validatePositiveDuration(p.Child("requestTimeout"), k.RequestTimeout)...)
	errs = append(errs, validatePositiveDuration(p.Child("dialTimeout"), k.DialTimeout)...)

	if t := k.TLS; t != nil {
		tp := p.Child("tls")
		if (t.CertFile == "") != (t.KeyFile == "") {
			errs = append(errs, field.Invalid(tp, fmt.Sprintf("certFile=%q keyFile=%q", t.CertFile, t.KeyFile),
				"certFile and keyFile must be set together (client certificate and its key) or not at all"))
		}
		if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
			errs = append(errs, field.Forbidden(tp.Child("insecureSkipVerify"),
				"contradicts caFile and serverName, which only matter when certificates are verified; remove one or the other"))
		}
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
		case "", KafkaCleanupDelete, KafkaCleanupCompact:
		default:
			errs = append(errs, field.NotSupported(cp.Child("cleanupPolicy"), c.CleanupPolicy,
				[]string{KafkaCleanupDelete, KafkaCleanupCompact}))
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
	if m == KafkaSASLPlain {
		return "the password"
	}
	return "the user name"
}

func validateKafkaSASL(p *field.Path, s *KafkaSASL) field.ErrorList {
	var errs field.ErrorList
	mechs := []string{KafkaSASLPlain, KafkaSASLScramSHA256, KafkaSASLScramSHA512}
	switch s.Mechanism {
	case "":
		errs = append(errs, field.Required(p.Child("mechanism"), "one of "+quoteAll(mechs)))
	case KafkaSASLPlain, KafkaSASLScramSHA256, KafkaSASLScramSHA512:
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
	if s.PasswordEnv != "" && !envName.MatchString(s.PasswordEnv) {
		errs = append(errs, field.Invalid(p.Child("passwordEnv"), field.OmitValueType{},
			"must be the name of an environment variable (letters, digits and '_', not starting with a digit), not the secret itself"))
	}
	return errs
}

// validateKafkaTopics expands every kafka sink's topic template for each
// resource that routes to it and checks the result against Kafka's rules,
// so that a name Kafka would refuse is reported before anything runs.
func validateKafkaTopics(c *Config) field.ErrorList {
	var errs field.ErrorList
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.Type != SinkTypeKafka || s.Kafka == nil {
			continue
		}
		tmpl := s.Kafka.Topic
		if tmpl == "" {
			tmpl = DefaultKafkaTopic
		}
		tp := field.NewPath("sinks").Index(i).Child("kafka", "topic")
		if len(validateKafkaTopicTemplate(tp, tmpl)) > 0 {
			continue // reported by validateKafkaSink
		}
		for j := range c.Resources {
			r := &c.Resources[j]
			routed := false
			for _, n := range r.Sinks {
				routed = routed || (n == s.Name && n != "")
			}
			if !routed || r.Resource == "" {
				continue
			}
			topic := KafkaTopic(tmpl, c.Cluster, r.Group, r.Version, r.Resource)
			if why := ValidateKafkaTopicName(topic); why != "" {
				errs = append(errs, field.Invalid(tp, tmpl, fmt.Sprintf(
					"expands to %q for resources[%d] (%s), which is not a legal Kafka topic name: it %s",
					topic, j, r.GVR().GroupResource().String(), why)))
			}
		}
	}
	return errs
}
