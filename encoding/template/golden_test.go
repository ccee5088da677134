package template_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

type object struct {
	cluster, group, version, resource, kind, namespace, name string
	op                                                       informer.Op
}

// objects cover the core group, dotted and "core" groups, cluster-scoped
// objects, an empty cluster, characters NATS escapes, and snapshot markers.
var objects = []object{
	{"demo", "", "v1", "configmaps", "ConfigMap", "default", "kube-root-ca.crt", informer.OpAdded},
	{"prod.eu", "apps", "v1", "deployments", "Deployment", "team-a", "web", informer.OpUpdated},
	{"demo", "", "v1", "namespaces", "Namespace", "", "kube-system", informer.OpDeleted},
	{"demo", "core", "v1", "things", "Thing", "ns", "a", informer.OpAdded},
	{"demo", "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", "", "system:node_x", informer.OpSynced},
	{"", "example.com", "v1beta1", "widgets", "Widget", "team-b", ".hidden", informer.OpAdded},
	{"c~1", "", "v1", "things", "Thing.V2", "ns", "a *>b", informer.OpAdded},
	{"demo", "apps", "v1", "deployments", "Deployment", "", "", informer.OpSnapshotStarted},
	{"demo", "", "v1", "configmaps", "ConfigMap", "", "", informer.OpSnapshotCompleted},
}

func eventOf(t *testing.T, o object) *encoding.Event {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: o.group, Version: o.version, Resource: o.resource}
	res := informer.NewResource(o.cluster, gvr, o.kind, o.namespace != "")
	c := &informer.Change{Op: o.op, Resource: res, Observed: time.Unix(1, 0)}
	if c.IsMarker() {
		c.Key, c.SnapshotID = res.KeyPrefix, "s1"
	} else {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(gvr.GroupVersion().String())
		u.SetKind(o.kind)
		u.SetNamespace(o.namespace)
		u.SetName(o.name)
		u.SetUID("uid")
		u.SetResourceVersion("1")
		c.Key, c.Object = res.ObjectKey(o.namespace, o.name), informer.FromUnstructured(u)
	}
	ev, err := encoding.New(c)
	if err != nil {
		t.Fatalf("encoding %+v: %v", o, err)
	}
	return ev
}

// kafkaTopic is the Kafka sink's topic of ev: the resource of its source,
// expanded by kafka.TopicName (what the sink, verify and tail call).
func kafkaTopic(t *testing.T, tmpl string, ev *encoding.Event) string {
	t.Helper()
	p := strings.Split(strings.TrimPrefix(ev.Source(), "/"), "/")
	switch len(p) {
	case 5:
		return kafka.TopicName(tmpl, p[1], "", p[3], p[4])
	case 6:
		return kafka.TopicName(tmpl, p[1], p[3], p[4], p[5])
	}
	t.Fatalf("source %q", ev.Source())
	return ""
}

var kafkaTemplates = []string{
	kafka.DefaultTopic,
	"kw.{cluster}.{group}.{version}.{resource}",
	"fixed-topic",
	"{resource}",
	"x{group}y-{resource}_z{version}",
	"{resource}.{resource}",
}

var natsTemplates = []string{
	kwnats.DefaultSubject,
	"kubewire.{resource}.{namespace}.{name}",
	"a.{kind}.{name}",
	"pre{cluster}post.x{group}.{version}v.{resource}-r",
	"fixed.subject",
}

// kafkaConfig is a valid config but for its kafka topic template, %q.
const kafkaConfig = `apiVersion: kubewire.io/v1alpha1
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
      brokers: ["kafka-0:9092"]
      topic: %q
`

// badKafkaTemplates and badNATSTemplates break each rule of their sink once.
var badKafkaTemplates = []string{
	"k8s.{namespace}", "k8s/{resource}", "k8s.{resource", "k8s.resource}", "..", ".", "", "{}", "{group}}",
	"k8s.{{group}}", "k8s.{group}{", "ünï.{resource}", strings.Repeat("x", 230) + ".{group}.{resource}",
	strings.Repeat("y", 250), "{cluster}.{Group}",
}

var badNATSTemplates = []string{
	"kubewire.{resource}{name}", "kubewire..{name}", ".a", "a.", "$JS.{name}", "a.*.{name}", "a.>", "a b.{name}",
	"a.{nope}", "a.{name", "a.name}", "a.{}", strings.Repeat("z", 257), "a.{name}x{kind}", "a.é", "a.\x7f", "{",
}

// record writes, one line each, every topic and subject the templates give
// for every object, the stream filter of every subject template, and the
// error config validation and the NATS sink give for every bad template.
func record(t *testing.T) []string {
	var lines []string
	printf := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	for _, o := range objects {
		ev := eventOf(t, o)
		for _, tmpl := range kafkaTemplates {
			printf("kafka %q %q => %q", tmpl, ev.ID(), kafkaTopic(t, tmpl, ev))
		}
		for _, tmpl := range natsTemplates {
			ct, err := kwnats.CompileTemplate(tmpl)
			if err != nil {
				t.Fatal(err)
			}
			s, err := ct.Subject(ev)
			if err != nil {
				t.Fatal(err)
			}
			printf("nats %q %q => %q", tmpl, ev.ID(), s)
		}
	}
	for _, tmpl := range natsTemplates {
		printf("stream %q => %q", tmpl, kwnats.StreamSubject(tmpl))
	}

	for _, tmpl := range badKafkaTemplates {
		_, err := config.Parse([]byte(fmt.Sprintf(kafkaConfig, tmpl)), app.DefaultRegistry())
		printf("kafka-invalid %q => %v", tmpl, err)
	}
	for _, tmpl := range badNATSTemplates {
		printf("nats-invalid %q => %v", tmpl, kwnats.ValidateSubjectTemplate(nil, tmpl).ToAggregate())
		_, err := kwnats.CompileTemplate(tmpl)
		printf("nats-compile %q => %v", tmpl, err)
	}
	return lines
}

// testdata/expansions.golden was recorded from the code before topics and
// subjects shared one template parser (the separate parsers of
// internal/base/config and sinks/nats), and must not be regenerated to make this
// test pass: a difference is a change of behaviour.
func TestTopicsSubjectsAndTemplateErrorsAreByteForByteWhatTheyWereBeforeTheSharedParser(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "expansions.golden"))
	if err != nil {
		t.Fatal(err)
	}
	wantLines := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	got := record(t)
	if len(got) != len(wantLines) {
		t.Errorf("recorded %d lines, the golden file has %d", len(got), len(wantLines))
	}
	for i := range min(len(got), len(wantLines)) {
		if got[i] != wantLines[i] {
			t.Errorf("line %d:\n got  %s\n want %s", i+1, got[i], wantLines[i])
		}
	}
}
