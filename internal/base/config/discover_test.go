package config_test

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

const discoverBase = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - group: ""
    version: v1
    resource: configmaps
    payload: reference
    sinks: [out]
  - discover:
      groups: ["*"]
      exclude:
        - {groups: ["*.example.com"], resources: ["gadgets"]}
    filter: "type != 'synced'"
    redact: [{path: "spec.token"}]
    payload: diff
    snapshotInterval: 1h
    keyBy: involvedObject
    sinks: [out]
sinks:
  - name: out
    type: stdout
`

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

func TestADiscoverEntryExpandsToEveryServedResourceItSelectsWithItsOwnSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(discoverBase), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	served := []schema.GroupVersionResource{
		gvr("", "v1", "configmaps"),                // named: the explicit entry wins
		gvr("", "v1", "pods"),                      // discovered
		gvr("", "v1", "secrets"),                   // never discovered
		gvr("", "v1", "endpoints"),                 // default exclusion
		gvr("", "v1", "events"),                    // default exclusion
		gvr("events.k8s.io", "v1", "events"),       // default exclusion
		gvr("coordination.k8s.io", "v1", "leases"), // default exclusion
		gvr("apps", "v1", "deployments"),           // discovered
		gvr("a.example.com", "v2", "widgets"),      // discovered
		gvr("a.example.com", "v2", "gadgets"),      // the entry's own exclusion
		gvr("discovery.k8s.io", "v1", "endpointslices"),
	}
	got := cfg.Expand(served)
	var names []string
	for _, r := range got {
		names = append(names, r.GVR().String())
	}
	want := []string{"/v1, Resource=configmaps", "/v1, Resource=pods", "apps/v1, Resource=deployments", "a.example.com/v2, Resource=widgets"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Fatalf("expanded to\n%v\nwant\n%v", names, want)
	}
	if got[0].Payload != "reference" || got[0].Discovered {
		t.Errorf("the explicit entry changed: %+v", got[0])
	}
	for _, r := range got[1:] {
		if !r.Discovered || r.Discover != nil || r.Payload != "diff" || r.Filter == "" || len(r.Redact) != 1 ||
			r.SnapshotInterval.Duration.String() != "1h0m0s" || len(r.Sinks) != 1 {
			t.Errorf("%s does not carry the discover entry's settings: %+v", r.GVR(), r)
		}
		if r.KeyBy != "object" {
			t.Errorf("%s: keyBy %q; involvedObject applies only to Events", r.GVR(), r.KeyBy)
		}
	}
}

func TestTurningTheDefaultExclusionsOffStillNeverDiscoversSecrets(t *testing.T) {
	off := false
	d := &config.Discover{DefaultExclusions: &off}
	if !d.Selects(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}) {
		t.Error("leases stay excluded with defaultExclusions: false")
	}
	if d.Selects(schema.GroupResource{Resource: "secrets"}) {
		t.Error("core secrets were discovered")
	}
	d = &config.Discover{Groups: []string{""}, Resources: []string{"secrets"}}
	if d.Selects(schema.GroupResource{Resource: "secrets"}) {
		t.Error("core secrets were discovered by a pattern naming them; only an explicit entry may stream them")
	}
}

func TestEveryDefaultExclusionGivesItsReason(t *testing.T) {
	for _, e := range config.DefaultExclusions() {
		if e.Reason == "" || len(e.Groups) == 0 || len(e.Resources) == 0 {
			t.Errorf("exclusion %+v lacks a reason, groups or resources", e)
		}
	}
}

func TestTheHashOfADiscoveredResourceDoesNotCountItsVersion(t *testing.T) {
	r := config.Resource{Discover: &config.Discover{}, Sinks: []string{"out"}}
	a, b := r.For(gvr("x.io", "v1beta1", "widgets")), r.For(gvr("x.io", "v1", "widgets"))
	if a.Hash() != b.Hash() {
		t.Error("a preferred version that changes changed the config hash; the checkpoint would not be resumed")
	}
	named := config.Resource{Group: "x.io", Version: "v1beta1", Resource: "widgets", Sinks: []string{"out"}}
	named2 := named
	named2.Version = "v1"
	if named.Hash() == named2.Hash() {
		t.Error("the version of a named resource no longer counts in its hash")
	}
}

func TestBadDiscoverEntriesAreRejectedWithPathValueAndExpectation(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{
			name: "A discover entry that also names a version is refused at that field.",
			yaml: strings.Replace(discoverBase, "  - discover:\n", "  - version: v1\n    discover:\n", 1),
			want: []string{`resources[1].version: Invalid value: "v1": must be omitted`},
		},
		{
			name: "A discover entry that also names a resource is refused at that field.",
			yaml: strings.Replace(discoverBase, "  - discover:\n", "  - resource: pods\n    discover:\n", 1),
			want: []string{`resources[1].resource: Invalid value: "pods": must be omitted`},
		},
		{
			name: "A malformed group pattern names the pattern and its index.",
			yaml: strings.Replace(discoverBase, `groups: ["*"]`, `groups: ["*", "[a"]`, 1),
			want: []string{`resources[1].discover.groups[1]: Invalid value: "[a": must be a glob`},
		},
		{
			name: "An empty exclusion, which would exclude everything, is refused.",
			yaml: strings.Replace(discoverBase, "        - {groups: [\"*.example.com\"], resources: [\"gadgets\"]}\n", "        - {}\n", 1),
			want: []string{"resources[1].discover.exclude[0]: Required value"},
		},
		{
			name: "An unknown field inside discover is reported with its path.",
			yaml: strings.Replace(discoverBase, `groups: ["*"]`, `grups: ["*"]`, 1),
			want: []string{"resources[1].discover.grups: Forbidden: unknown field"},
		},
		{
			name: "allowSecretData on a discover entry is refused: Secrets are never discovered.",
			yaml: strings.Replace(discoverBase, "    payload: diff\n", "    payload: diff\n    allowSecretData: true\n", 1),
			want: []string{"resources[1].allowSecretData: Forbidden"},
		},
		{
			name: "A Kafka topic with {version} for a discover entry is refused.",
			yaml: strings.Replace(discoverBase, "    type: stdout\n", "    type: kafka\n    kafka: {brokers: [\"k:9092\"], topic: \"k8s.{group}.{version}.{resource}\"}\n", 1),
			want: []string{`sinks[0].kafka.topic: Invalid value: "k8s.{group}.{version}.{resource}": must not use {version}`, "resources[1] discovers"},
		},
		{
			name: "The default NATS subject, which holds {version}, is refused for a discover entry.",
			yaml: strings.Replace(discoverBase, "    type: stdout\n", "    type: nats\n    nats: {servers: [\"nats://n:4222\"]}\n", 1),
			want: []string{`sinks[0].nats.subject: Invalid value: "kubewire.{cluster}.{group}.{version}.{resource}.{namespace}.{name}": must not use {version}`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tc.yaml), app.DefaultRegistry())
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q; got:\n%s", w, err)
				}
			}
		})
	}
}

func TestANATSSubjectWithoutVersionIsFineForADiscoverEntry(t *testing.T) {
	y := strings.Replace(discoverBase, "    type: stdout\n",
		"    type: nats\n    nats: {servers: [\"nats://n:4222\"], subject: \"kw.{cluster}.{group}.{resource}.{namespace}.{name}\"}\n", 1)
	if _, err := config.Parse([]byte(y), app.DefaultRegistry()); err != nil {
		t.Fatal(err)
	}
}
