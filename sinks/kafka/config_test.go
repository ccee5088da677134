package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
)

// kafkaBase is a valid configuration with one kafka sink that the cases
// modify. Its block ends with "      brokers: [...]\n" so that cases can append
// fields.
const kafkaBase = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    sinks: [k]
  - group: demo.kubewire.io
    version: v1
    resource: widgets
    sinks: [k]
sinks:
  - name: k
    type: kafka
    kafka:
      brokers: ["kafka-0:9092", "kafka-1:9092"]
`

func TestTheKafkaBaseConfigIsValidAndDefaulted(t *testing.T) {
	cfg, err := config.Parse([]byte(kafkaBase), app.DefaultRegistry())
	if err != nil {
		t.Fatalf("kafka base config: %v", err)
	}
	d := cfg.Sinks[0].Block.(*kafka.Config)
	checks := []struct {
		what      string
		got, want any
	}{
		{"topic", d.Topic, "k8s.{group}.{resource}"},
		{"contentMode", d.ContentMode, "binary"},
		{"balancer", d.Balancer, "murmur2"},
		{"acks", d.Acks, "all"},
		{"compression", d.Compression, "none"},
		{"batch.maxMessages", d.Batch.MaxMessages, 1000},
		{"batch.maxBytes", d.Batch.MaxBytes, 512 << 10},
		{"batch.linger", d.Batch.Linger.Duration, 5 * time.Millisecond},
		{"clientId", d.ClientID, "kubewire"},
		{"tombstones", *d.Tombstones, true},
		{"idempotent", *d.Idempotent, true},
		{"requestTimeout", d.RequestTimeout.Duration, 30 * time.Second},
		{"createTopics", d.CreateTopics == nil, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("default %s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestExplicitKafkaValuesSurviveDefaulting(t *testing.T) {
	cfg, err := config.Parse([]byte(kafkaBase+`      tombstones: false
      batch: {linger: 0, maxMessages: 10}
      createTopics: {cleanupPolicy: compact}
`), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Sinks[0].Block.(*kafka.Config)
	if *d.Tombstones {
		t.Error("tombstones: false was replaced by the default")
	}
	if d.Batch.Linger.Duration != 0 || d.Batch.MaxMessages != 10 {
		t.Errorf("batch = %+v, want linger 0 and maxMessages 10", d.Batch)
	}
	if c := d.CreateTopics; c.CleanupPolicy != "compact" || c.Partitions != -1 || c.ReplicationFactor != -1 {
		t.Errorf("createTopics = %+v, want compact with broker-default partitions and replication", c)
	}
	k := &kafka.Config{Batch: &kafka.Batch{MaxMessages: 10}}
	if k.Defaulted(); k.Batch.MaxBytes != 0 {
		t.Error("Defaulted modified the configuration it was called on")
	}
}

func TestIdempotenceFollowsAcksUnlessSet(t *testing.T) {
	cases := []struct {
		name, extra string
		want        bool
	}{
		{"With acks all it is on.", "", true},
		{"With acks leader it is off.", "      acks: leader\n", false},
		{"With acks none it is off.", "      acks: none\n", false},
		{"It can be turned off with acks all.", "      idempotent: false\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(kafkaBase+c.extra), app.DefaultRegistry())
			if err != nil {
				t.Fatal(err)
			}
			if got := *cfg.Sinks[0].Block.(*kafka.Config).Idempotent; got != c.want {
				t.Errorf("idempotent = %v, want %v", got, c.want)
			}
		})
	}
}

func TestKafkaTopicTemplatesExpandPerResource(t *testing.T) {
	cases := []struct {
		name, tmpl, group, want string
	}{
		{"The core group is written as core.", "k8s.{group}.{resource}", "", "k8s.core.configmaps"},
		{"A named group is written as it is.", "k8s.{group}.{resource}", "apps", "k8s.apps.configmaps"},
		{"Every placeholder expands.", "{cluster}-{group}-{version}-{resource}", "", "demo-core-v1-configmaps"},
		{"A fixed topic stays as it is.", "audit", "apps", "audit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := kafka.TopicName(c.tmpl, "demo", c.group, "v1", "configmaps"); got != c.want {
				t.Errorf("TopicName(%q) = %q, want %q", c.tmpl, got, c.want)
			}
		})
	}
}

func TestKafkaTopicNamesFollowKafkasRules(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"k8s.core.configmaps", true},
		{"A_b-9.x", true},
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{".", false},
		{"..", false},
		{"...", true},
		{"", false},
		{"has space", false},
		{"slash/topic", false},
		{"ünï", false},
	}
	for _, c := range cases {
		if why := kafka.ValidateTopicName(c.name); (why == "") != c.ok {
			t.Errorf("ValidateTopicName(%.20q...) = %q, want ok=%v", c.name, why, c.ok)
		}
	}
}

func TestBadKafkaConfigsAreRejectedWithPathValueAndExpectation(t *testing.T) {
	withBlock := func(extra string) string { return kafkaBase + extra }
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "A kafka sink without its block needs brokers.",
			yaml: strings.Replace(kafkaBase, "    kafka:\n      brokers: [\"kafka-0:9092\", \"kafka-1:9092\"]\n", "", 1),
			want: []string{"sinks[0].kafka: Required value", "brokers"},
		},
		{
			name: "An empty broker list is required.",
			yaml: strings.Replace(kafkaBase, `["kafka-0:9092", "kafka-1:9092"]`, "[]", 1),
			want: []string{"sinks[0].kafka.brokers: Required value", "host:port"},
		},
		{
			name: "A broker without a port is rejected.",
			yaml: strings.Replace(kafkaBase, `"kafka-1:9092"`, `"kafka-1"`, 1),
			want: []string{`sinks[0].kafka.brokers[1]: Invalid value: "kafka-1"`, "host:port"},
		},
		{
			name: "A broker with a scheme is rejected and TLS is pointed to.",
			yaml: strings.Replace(kafkaBase, `"kafka-1:9092"`, `"tls://kafka-1:9093"`, 1),
			want: []string{"sinks[0].kafka.brokers[1]", "without a scheme", "use tls"},
		},
		{
			name: "A broker with credentials is rejected without echoing them.",
			yaml: strings.Replace(kafkaBase, `"kafka-1:9092"`, `"user:s3cret@kafka-1:9092"`, 1),
			want: []string{"sinks[0].kafka.brokers[1]", "without credentials"},
		},
		{
			name: "A duplicate broker is reported.",
			yaml: strings.Replace(kafkaBase, `"kafka-1:9092"`, `"kafka-0:9092"`, 1),
			want: []string{`sinks[0].kafka.brokers[1]: Duplicate value: "kafka-0:9092"`},
		},
		{
			name: "A topic template with an unknown placeholder lists the known ones.",
			yaml: withBlock("      topic: k8s.{namespace}\n"),
			want: []string{`sinks[0].kafka.topic: Invalid value: "k8s.{namespace}"`, "{cluster}, {group}, {version}, {resource}"},
		},
		{
			name: "A topic template with an illegal character is rejected.",
			yaml: withBlock("      topic: k8s/{resource}\n"),
			want: []string{`sinks[0].kafka.topic: Invalid value: "k8s/{resource}"`, `found '/'`},
		},
		{
			name: "A topic template with an unclosed brace is rejected.",
			yaml: withBlock("      topic: k8s.{resource\n"),
			want: []string{"sinks[0].kafka.topic", `"{" without a matching "}"`},
		},
		{
			name: "A fixed topic named .. is rejected.",
			yaml: withBlock("      topic: ..\n"),
			want: []string{`sinks[0].kafka.topic: Invalid value: ".."`},
		},
		{
			name: "A template that expands past 249 characters for a resource names the resource.",
			yaml: withBlock("      topic: " + strings.Repeat("x", 230) + ".{group}.{resource}\n"),
			want: []string{"sinks[0].kafka.topic", "for resources[1] (widgets.demo.kubewire.io)", "at most 249 characters"},
		},
		{
			name: "An idempotent producer without acks all is refused with the reason.",
			yaml: withBlock("      acks: leader\n      idempotent: true\n"),
			want: []string{"sinks[0].kafka.idempotent: Invalid value: true", `needs acks "all"`},
		},
		{
			name: "A key-less balancer is refused with the reason.",
			yaml: withBlock("      balancer: roundrobin\n"),
			want: []string{`sinks[0].kafka.balancer: Invalid value: "roundrobin"`, "orders records only within a partition"},
		},
		{
			name: "An unknown balancer lists the supported ones.",
			yaml: withBlock("      balancer: sticky\n"),
			want: []string{`sinks[0].kafka.balancer: Unsupported value: "sticky"`, `"murmur2", "crc32", "hash"`},
		},
		{
			name: "An unknown acks level lists the supported ones.",
			yaml: withBlock("      acks: \"1\"\n"),
			want: []string{`sinks[0].kafka.acks: Unsupported value: "1"`, `"all", "leader", "none"`},
		},
		{
			name: "An unknown compression lists the supported ones.",
			yaml: withBlock("      compression: brotli\n"),
			want: []string{`sinks[0].kafka.compression: Unsupported value: "brotli"`, `"zstd"`},
		},
		{
			name: "An unknown content mode lists the supported ones.",
			yaml: withBlock("      contentMode: batched\n"),
			want: []string{`sinks[0].kafka.contentMode: Unsupported value: "batched"`},
		},
		{
			name: "A negative batch size is rejected.",
			yaml: withBlock("      batch: {maxMessages: -1}\n"),
			want: []string{"sinks[0].kafka.batch.maxMessages: Invalid value: -1"},
		},
		{
			name: "A linger that is not a duration is rejected.",
			yaml: withBlock("      batch: {linger: soon}\n"),
			want: []string{`sinks[0].kafka.batch.linger: Invalid value: "soon"`, "duration"},
		},
		{
			name: "A linger over the limit is rejected.",
			yaml: withBlock("      batch: {linger: 1m}\n"),
			want: []string{`sinks[0].kafka.batch.linger: Invalid value: "1m0s"`, "between 0"},
		},
		{
			name: "A certificate without its key is rejected.",
			yaml: withBlock("      tls: {certFile: /c.pem}\n"),
			want: []string{"sinks[0].kafka.tls", "certFile and keyFile must be set together"},
		},
		{
			name: "Skipping verification while naming a CA is contradictory.",
			yaml: withBlock("      tls: {caFile: /ca.pem, insecureSkipVerify: true}\n"),
			want: []string{"sinks[0].kafka.tls.insecureSkipVerify: Forbidden"},
		},
		{
			name: "SASL needs a mechanism, a user and a password source.",
			yaml: withBlock("      sasl: {}\n"),
			want: []string{"sinks[0].kafka.sasl.mechanism: Required value", "sinks[0].kafka.sasl.username: Required value",
				"sinks[0].kafka.sasl.passwordFile: Required value", "never written in the configuration"},
		},
		{
			name: "An unknown SASL mechanism lists the supported ones.",
			yaml: withBlock("      sasl: {mechanism: GSSAPI, username: u, passwordFile: /p}\n"),
			want: []string{`sinks[0].kafka.sasl.mechanism: Unsupported value: "GSSAPI"`, `"SCRAM-SHA-512"`},
		},
		{
			name: "A password inline is rejected as an unknown field.",
			yaml: withBlock("      sasl: {mechanism: PLAIN, username: u, password: hunter2}\n"),
			want: []string{"sinks[0].kafka.sasl.password: Forbidden: unknown field"},
		},
		{
			name: "A password in passwordEnv is refused without echoing it.",
			yaml: withBlock("      sasl: {mechanism: PLAIN, username: u, passwordEnv: \"hunter2!\"}\n"),
			want: []string{"sinks[0].kafka.sasl.passwordEnv: Invalid value", "name of an environment variable"},
		},
		{
			name: "Both password sources at once are refused.",
			yaml: withBlock("      sasl: {mechanism: PLAIN, username: u, passwordEnv: P, passwordFile: /p}\n"),
			want: []string{"sinks[0].kafka.sasl.passwordEnv: Forbidden", "not both"},
		},
		{
			name: "An unknown cleanup policy lists the supported ones.",
			yaml: withBlock("      createTopics: {cleanupPolicy: archive}\n"),
			want: []string{`sinks[0].kafka.createTopics.cleanupPolicy: Unsupported value: "archive"`},
		},
		{
			name: "A partition count below -1 is rejected.",
			yaml: withBlock("      createTopics: {partitions: -3}\n"),
			want: []string{"sinks[0].kafka.createTopics.partitions: Invalid value: -3"},
		},
		{
			name: "A kafka block on a stdout sink is forbidden.",
			yaml: strings.Replace(kafkaBase, "type: kafka", "type: stdout", 1),
			want: []string{`sinks[0].kafka: Forbidden: may only be set when type is "kafka"`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), app.DefaultRegistry())
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the error lacks %q:\n%s", w, msg)
				}
			}
			for _, secret := range []string{"s3cret", "hunter2"} {
				if strings.Contains(msg, secret) {
					t.Errorf("the error echoes a secret:\n%s", msg)
				}
			}
		})
	}
}

func TestSASLWithoutTLSIsRefusedUnlessAllowInsecureIsSet(t *testing.T) {
	cases := []struct {
		name, extra string
		// want lists what the error must say; nil means the config is valid.
		want []string
		// warned reports whether Warnings mentions the clear-text SASL.
		warned bool
	}{
		{
			name:  "PLAIN without TLS is refused and the error names allowInsecure.",
			extra: "      sasl: {mechanism: PLAIN, username: u, passwordFile: /p}\n",
			want:  []string{"sinks[0].kafka.tls: Required value", "PLAIN", "clear text", "sinks[0].kafka.sasl.allowInsecure: true"},
		},
		{
			name:  "SCRAM-SHA-256 without TLS is refused.",
			extra: "      sasl: {mechanism: SCRAM-SHA-256, username: u, passwordFile: /p}\n",
			want:  []string{"sinks[0].kafka.tls: Required value", "SCRAM-SHA-256", "sinks[0].kafka.sasl.allowInsecure: true"},
		},
		{
			name:  "SCRAM-SHA-512 without TLS is refused.",
			extra: "      sasl: {mechanism: SCRAM-SHA-512, username: u, passwordEnv: KAFKA_PASSWORD}\n",
			want:  []string{"sinks[0].kafka.tls: Required value", "SCRAM-SHA-512", "sinks[0].kafka.sasl.allowInsecure: true"},
		},
		{
			name:  "allowInsecure: false is the same as leaving it out.",
			extra: "      sasl: {mechanism: PLAIN, username: u, passwordFile: /p, allowInsecure: false}\n",
			want:  []string{"sinks[0].kafka.tls: Required value", "sinks[0].kafka.sasl.allowInsecure: true"},
		},
		{
			name:  "PLAIN over TLS is accepted without a warning.",
			extra: "      tls: {caFile: /ca.pem}\n      sasl: {mechanism: PLAIN, username: u, passwordFile: /p}\n",
		},
		{
			name:  "SCRAM over TLS with the system roots (an empty tls block) is accepted.",
			extra: "      tls: {}\n      sasl: {mechanism: SCRAM-SHA-512, username: u, passwordFile: /p}\n",
		},
		{
			name:   "PLAIN without TLS is accepted with allowInsecure: true, and warned about.",
			extra:  "      sasl: {mechanism: PLAIN, username: u, passwordFile: /p, allowInsecure: true}\n",
			warned: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(kafkaBase+c.extra), app.DefaultRegistry())
			if c.want == nil {
				if err != nil {
					t.Fatalf("the configuration was refused: %v", err)
				}
				warned := strings.Contains(strings.Join(cfg.Warnings(), "\n"), "sinks[0].kafka.sasl.allowInsecure")
				if warned != c.warned {
					t.Errorf("warned about allowInsecure = %v, want %v; warnings: %q", warned, c.warned, cfg.Warnings())
				}
				return
			}
			testkit.ErrorSays(t, err, c.want...)
		})
	}
}

// An explicit 0 where 0 is not a usable value used to be replaced by the
// default without a word, unlike the same mistake at the top level.
func TestAnExplicitZeroInASinkBlockIsRejectedRatherThanDefaulted(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "kafka batch.maxMessages: 0 is rejected with its path.",
			yaml: kafkaBase + "      batch: {maxMessages: 0}\n",
			want: []string{"sinks[0].kafka.batch.maxMessages: Invalid value: 0", "omit the field for the default (1000)"},
		},
		{
			name: "kafka batch.maxBytes: 0 is rejected with its path.",
			yaml: kafkaBase + "      batch: {maxBytes: 0}\n",
			want: []string{"sinks[0].kafka.batch.maxBytes: Invalid value: 0", "omit the field for the default"},
		},
		{
			name: "kafka createTopics.partitions: 0 is rejected with its path.",
			yaml: kafkaBase + "      createTopics: {partitions: 0}\n",
			want: []string{"sinks[0].kafka.createTopics.partitions: Invalid value: 0", "-1 (the broker's default) or at least 1"},
		},
		{
			name: "kafka createTopics.replicationFactor: 0 is rejected with its path.",
			yaml: kafkaBase + "      createTopics: {replicationFactor: 0}\n",
			want: []string{"sinks[0].kafka.createTopics.replicationFactor: Invalid value: 0", "-1 (the broker's default)"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.yaml), app.DefaultRegistry())
			testkit.ErrorSays(t, err, c.want...)
		})
	}
}

func TestMeaningfulZerosAndNullsAreAccepted(t *testing.T) {
	cases := []struct {
		name string
		yaml string
	}{
		{"kafka batch.linger: 0 means send at once.", kafkaBase + "      batch: {linger: 0}\n"},
		{"A null number is the same as leaving it out.", kafkaBase + "      batch: {maxMessages: null}\n"},
		{"A null top-level number is the same as leaving it out.", strings.Replace(kafkaBase, "cluster: demo\n", "cluster: demo\nclient: {qps: null}\n", 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := config.Parse([]byte(c.yaml), app.DefaultRegistry()); err != nil {
				t.Fatalf("the configuration was refused: %v", err)
			}
		})
	}
}
