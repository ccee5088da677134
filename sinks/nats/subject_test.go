package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

func objectEvent(t testing.TB, group, version, resource, namespace, name string) *encoding.Event {
	t.Helper()
	ev, err := tryObjectEvent(group, version, resource, namespace, name)
	if err != nil {
		t.Fatalf("encoding: %v", err)
	}
	return ev
}

func tryObjectEvent(group, version, resource, namespace, name string) (*encoding.Event, error) {
	res := informer.NewResource("demo", schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, "Thing", namespace != "")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(schema.GroupVersion{Group: group, Version: version}.String())
	u.SetKind("Thing")
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetUID("uid")
	u.SetResourceVersion("1")
	return encoding.New(&informer.Change{Op: informer.OpAdded, Resource: res, Key: res.ObjectKey(namespace, name), Object: informer.FromUnstructured(u), Observed: time.Unix(1, 0)})
}

func TestSubjectsEscapeEveryTokenAndUseFixedTokensForMissingValues(t *testing.T) {
	tmpl, err := kwnats.CompileTemplate("kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                                       string
		group, version, resource, namespace, objNm string
		want                                       string
	}{
		{"A core-group object gets the group token core.", "", "v1", "configmaps", "default", "kube-root-ca.crt",
			"kubewire.demo.core.v1.configmaps.default.kube-root-ca_crt"},
		{"Dots in a group become underscores.", "apps.example.com", "v1", "widgets", "team-a", "w1",
			"kubewire.demo.apps_example_com.v1.widgets.team-a.w1"},
		{"A cluster-scoped object gets the namespace token _cluster.", "", "v1", "nodes", "", "node-1.internal",
			"kubewire.demo.core.v1.nodes._cluster.node-1_internal"},
		{"A real group called core is escaped away from the core group's token.", "core", "v1", "things", "ns", "a",
			"kubewire.demo.~63ore.v1.things.ns.a"},
		{"Colons in RBAC names are escaped.", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "system:node",
			"kubewire.demo.rbac_authorization_k8s_io.v1.clusterroles._cluster.system~3Anode"},
		{"Wildcards and spaces in a name are escaped.", "", "v1", "things", "ns", "a *>b",
			"kubewire.demo.core.v1.things.ns.a~20~2A~3Eb"},
		{"An underscore in a name is escaped so it cannot pass for a dot.", "", "v1", "things", "ns", "a_b",
			"kubewire.demo.core.v1.things.ns.a~5Fb"},
		{"A leading dot is escaped so no name can pass for a fixed token.", "", "v1", "things", "ns", ".snapshot",
			"kubewire.demo.core.v1.things.ns.~2Esnapshot"},
		{"Non-ASCII is escaped byte by byte.", "", "v1", "things", "ns", "ü",
			"kubewire.demo.core.v1.things.ns.~C3~BC"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tmpl.Subject(objectEvent(t, c.group, c.version, c.resource, c.namespace, c.objNm))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("subject %q, want %q", got, c.want)
			}
			if !server.IsValidLiteralSubject(got) {
				t.Fatalf("nats-server says %q is not a valid literal subject", got)
			}
		})
	}
}

func TestSnapshotMarkersGoToTheResourcesSnapshotSubject(t *testing.T) {
	tmpl, err := kwnats.CompileTemplate(kwnatsDefault)
	if err != nil {
		t.Fatal(err)
	}
	res := informer.NewResource("demo", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	ev, err := encoding.New(&informer.Change{Op: informer.OpSnapshotStarted, Resource: res, Key: res.KeyPrefix, SnapshotID: "s1", Observed: time.Unix(1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Subject(ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kubewire.demo.core.v1.configmaps._snapshot._snapshot"; got != want {
		t.Fatalf("subject %q, want %q", got, want)
	}
}

func TestAGapGoesToTheResourcesSnapshotSubjectWhateverItsNamespace(t *testing.T) {
	tmpl, err := kwnats.CompileTemplate(kwnatsDefault)
	if err != nil {
		t.Fatal(err)
	}
	res := informer.NewResource("demo", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	for _, ns := range []string{"", "team-a"} {
		ev, err := encoding.New(&informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix, Observed: time.Unix(1, 0),
			Gap: &informer.Gap{Namespace: ns, From: "5", To: "9", Reason: informer.GapExpired}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Subject(ev)
		if err != nil {
			t.Fatal(err)
		}
		if want := "kubewire.demo.core.v1.configmaps._snapshot._snapshot"; got != want {
			t.Errorf("gap in namespace %q: subject %q, want %q", ns, got, want)
		}
	}
}

const kwnatsDefault = "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}"

func TestInvalidTemplatesDoNotCompile(t *testing.T) {
	for _, tmpl := range []string{"", "a..b", "a.*", "a.>", "a.{nope}", "a.{name", "a.{namespace}{name}", "$JS.x", "a b"} {
		if _, err := kwnats.CompileTemplate(tmpl); err == nil {
			t.Errorf("CompileTemplate(%q) succeeded; want an error", tmpl)
		}
	}
}

// FuzzSubjects checks the two promises of the escaping: every object gets a
// valid literal subject, and two different objects never share one.
func FuzzSubjects(f *testing.F) {
	f.Add("", "v1", "configmaps", "default", "a.b", "apps", "v1", "deployments", "", "a_b")
	f.Add("core", "v1", "x", "ns", ".snapshot", "", "v1", "x", "ns", "_snapshot")
	f.Add("a.b", "v1", "x", "", "n", "a_b", "v1", "x", "_cluster", "n")
	tmpl, err := kwnats.CompileTemplate(kwnatsDefault)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, g1, v1, r1, ns1, n1, g2, v2, r2, ns2, n2 string) {
		// Objects always have a name, version and resource, and none of
		// these hold "/" (the event source and key are paths).
		for _, s := range []string{g1, v1, r1, ns1, n1, g2, v2, r2, ns2, n2} {
			if strings.Contains(s, "/") {
				t.Skip()
			}
		}
		if n1 == "" || n2 == "" || v1 == "" || v2 == "" || r1 == "" || r2 == "" {
			t.Skip()
		}
		e1, err1 := tryObjectEvent(g1, v1, r1, ns1, n1)
		e2, err2 := tryObjectEvent(g2, v2, r2, ns2, n2)
		if err1 != nil || err2 != nil {
			t.Skip() // not a valid CloudEvent (a source that is no URI); encoding refuses it before any sink
		}
		s1, err1 := tmpl.Subject(e1)
		s2, err2 := tmpl.Subject(e2)
		if err1 != nil || err2 != nil {
			t.Fatalf("Subject: %v, %v", err1, err2)
		}
		for _, s := range []string{s1, s2} {
			if !server.IsValidLiteralSubject(s) || strings.ContainsAny(s, " \t\r\n") {
				t.Fatalf("invalid subject %q", s)
			}
		}
		same := g1 == g2 && v1 == v2 && r1 == r2 && ns1 == ns2 && n1 == n2
		if s1 == s2 && !same {
			t.Fatalf("objects (%q %q %q %q %q) and (%q %q %q %q %q) share subject %q",
				g1, v1, r1, ns1, n1, g2, v2, r2, ns2, n2, s1)
		}
	})
}
