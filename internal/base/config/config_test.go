package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/sinks/stdout"
	"strconv"
)

// base is a valid configuration that the bad-config cases modify.
const base = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
client:
  qps: 50
  burst: 100
dispatch:
  drainTimeout: 30s
resources:
  - group: ""
    version: v1
    resource: configmaps
    namespaces: [team-a, team-b]
    labelSelector: app=web
    fieldSelector: metadata.name!=skip
    operations: [added, updated, deleted, synced]
    snapshotInterval: 30m
    sinks: [out]
  - group: demo.kubewire.io
    version: v1
    resource: widgets
    sinks: [out]
sinks:
  - name: out
    type: stdout
    stdout:
      pretty: false
`

// edit returns base with each old string replaced by the new one that
// follows it. It panics if an old string is not in base, so a typo in a test
// case cannot silently turn it into a test of the valid config.
// registered is the registered sink types as messages list them: a sink
// type added later changes no test here.
var registered = quoted(app.DefaultRegistry().Types())

func quoted(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

func edit(pairs ...string) string {
	s := base
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			panic(fmt.Sprintf("edit: %q is not in the base config", pairs[i]))
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func TestTheBaseConfigIsValid(t *testing.T) {
	if _, err := config.Parse([]byte(base), app.DefaultRegistry()); err != nil {
		t.Fatalf("base config: %v", err)
	}
}

func TestBadConfigsAreRejectedWithPathValueAndExpectation(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // substrings that must all appear in the error message
	}{
		{
			name: "An unknown top-level field is reported with its name.",
			yaml: base + "sinkz: []\n",
			want: []string{"sinkz: Forbidden: unknown field"},
		},
		{
			name: "An unknown field inside a sink is reported with its full path.",
			yaml: edit("    stdout:\n      pretty: false\n", "    stdot: {}\n"),
			want: []string{"sinks[0].stdot: Forbidden: unknown field"},
		},
		{
			name: "An unknown field inside a resource is reported with its index.",
			yaml: edit("    labelSelector: app=web", "    labelselector: app=web"),
			want: []string{"resources[0].labelselector: Forbidden: unknown field"},
		},
		{
			name: "A wrong apiVersion names the one supported version.",
			yaml: edit("apiVersion: kubewire.io/v1alpha1", "apiVersion: kubewire.io/v1"),
			want: []string{`apiVersion: Unsupported value: "kubewire.io/v1"`, `supported values: "kubewire.io/v1alpha1"`},
		},
		{
			name: "A missing apiVersion is required.",
			yaml: edit("apiVersion: kubewire.io/v1alpha1\n", ""),
			want: []string{"apiVersion: Required value", `must be "kubewire.io/v1alpha1"`},
		},
		{
			name: "A wrong kind names the one supported kind.",
			yaml: edit("kind: Config", "kind: Configuration"),
			want: []string{`kind: Unsupported value: "Configuration"`, `supported values: "Config"`},
		},
		{
			name: "A spool smaller than the documented minimum is rejected with the minimum.",
			yaml: edit("    type: stdout\n", "    type: stdout\n    spool: {maxBytes: 2097152}\n"),
			want: []string{"sinks[0].spool.maxBytes: Invalid value: 2097152", "at least 4194304 (4 MiB)"},
		},
		{
			name: "A spool of one byte is rejected.",
			yaml: edit("    type: stdout\n", "    type: stdout\n    spool: {maxBytes: 1}\n"),
			want: []string{"sinks[0].spool.maxBytes: Invalid value: 1", "at least 4194304"},
		},
		{
			name: "A missing cluster is required and explained.",
			yaml: edit("cluster: demo\n", ""),
			want: []string{"cluster: Required value", "DNS-1123 label"},
		},
		{
			name: "A cluster name that is not a DNS-1123 label is rejected.",
			yaml: edit("cluster: demo", "cluster: Demo.Cluster"),
			want: []string{`cluster: Invalid value: "Demo.Cluster"`, "RFC 1123 label"},
		},
		{
			name: "An empty resources list is rejected.",
			yaml: edit(base[strings.Index(base, "resources:"):strings.Index(base, "sinks:\n")], "resources: []\n"),
			want: []string{"resources: Required value", "at least one resource"},
		},
		{
			name: "A resource without a version is rejected.",
			yaml: edit("    resource: widgets", "    version: \"\"\n    resource: widgets", "  - group: demo.kubewire.io\n    version: v1\n", "  - group: demo.kubewire.io\n"),
			want: []string{"resources[1].version: Required value", `the API version, e.g. "v1"`},
		},
		{
			name: "A resource name with uppercase letters is rejected.",
			yaml: edit("resource: widgets", "resource: Widgets"),
			want: []string{`resources[1].resource: Invalid value: "Widgets"`, "lowercase plural resource name"},
		},
		{
			name: "An unparsable label selector is rejected with the parser's reason.",
			yaml: edit("labelSelector: app=web", `labelSelector: "app in (web"`),
			want: []string{`resources[0].labelSelector: Invalid value: "app in (web"`, "must be a valid label selector", "unable to parse requirement"},
		},
		{
			name: "An unparsable field selector is rejected with the parser's reason.",
			yaml: edit("fieldSelector: metadata.name!=skip", "fieldSelector: metadata.name"),
			want: []string{`resources[0].fieldSelector: Invalid value: "metadata.name"`, "must be a valid field selector"},
		},
		{
			name: "A field selector without a field name is rejected.",
			yaml: edit("fieldSelector: metadata.name!=skip", `fieldSelector: "=x"`),
			want: []string{`resources[0].fieldSelector: Invalid value: "=x"`, "must be a valid field selector", `the requirement "=x" has no field name`},
		},
		{
			name: "A field selector names the one requirement that lacks a field name.",
			yaml: edit("fieldSelector: metadata.name!=skip", `fieldSelector: "metadata.name!=skip,!=y"`),
			want: []string{`resources[0].fieldSelector: Invalid value: "metadata.name!=skip,!=y"`, `the requirement "!=y" has no field name`},
		},
		{
			name: "An unknown operation lists the supported ones.",
			yaml: edit("operations: [added, updated, deleted, synced]", "operations: [added, removed]"),
			want: []string{`resources[0].operations[1]: Unsupported value: "removed"`, `supported values: "added", "updated", "deleted", "synced"`},
		},
		{
			name: "A repeated operation is a duplicate.",
			yaml: edit("operations: [added, updated, deleted, synced]", "operations: [added, synced, added]"),
			want: []string{`resources[0].operations[2]: Duplicate value: "added"`},
		},
		{
			name: "An explicitly empty operations list is rejected rather than emitting nothing.",
			yaml: edit("operations: [added, updated, deleted, synced]", "operations: []"),
			want: []string{"resources[0].operations: Required value", "omit operations to emit all of them"},
		},
		{
			name: "A reference to an undefined sink names the sinks that exist.",
			yaml: edit("    resource: widgets\n    sinks: [out]", "    resource: widgets\n    sinks: [out, archive]"),
			want: []string{`resources[1].sinks[1]: Invalid value: "archive"`, `must name a sink listed in sinks (defined: "out")`},
		},
		{
			name: "A resource with no sinks is rejected.",
			yaml: edit("    resource: widgets\n    sinks: [out]", "    resource: widgets\n    sinks: []"),
			want: []string{"resources[1].sinks: Required value", "at least one sink"},
		},
		{
			name: "Two sinks with the same name are rejected.",
			yaml: base + "  - name: out\n    type: stdout\n",
			want: []string{`sinks[1].name: Duplicate value: "out"`},
		},
		{
			name: "The same group and resource listed twice is rejected even with another version.",
			yaml: edit("resources:\n", "resources:\n  - version: v1beta1\n    resource: widgets\n    group: demo.kubewire.io\n    sinks: [out]\n"),
			want: []string{`resources[2]: Duplicate value: "widgets.demo.kubewire.io"`, "resources[0] already watches", "one informer per resource"},
		},
		{
			name: "A snapshotInterval that is not a duration is reported without hiding other errors.",
			yaml: edit("snapshotInterval: 30m", "snapshotInterval: 30 minutes", "cluster: demo", "cluster: Demo"),
			want: []string{`resources[0].snapshotInterval: Invalid value: "30 minutes"`, `must be a duration such as "30s"`, `cluster: Invalid value: "Demo"`},
		},
		{
			name: "A drainTimeout that is not a duration is rejected.",
			yaml: edit("drainTimeout: 30s", "drainTimeout: soon"),
			want: []string{`dispatch.drainTimeout: Invalid value: "soon"`, "must be a duration"},
		},
		{
			name: "A zero drainTimeout is rejected because shutdown would drop in-flight events.",
			yaml: edit("drainTimeout: 30s", "drainTimeout: 0s"),
			want: []string{`dispatch.drainTimeout: Invalid value: "0s"`, "must be greater than 0"},
		},
		{
			name: "A bare number other than 0 for snapshotInterval needs a unit.",
			yaml: edit("snapshotInterval: 30m", "snapshotInterval: 15"),
			want: []string{`resources[0].snapshotInterval: Invalid value: "15"`, "only allowed for 0"},
		},
		{
			name: "A snapshotInterval below ten seconds is rejected.",
			yaml: edit("snapshotInterval: 30m", "snapshotInterval: 5s"),
			want: []string{`resources[0].snapshotInterval: Invalid value: "5s"`, "must be 0 (no periodic snapshots) or at least 10s"},
		},
		{
			name: "A snapshotInterval is forbidden when the synced operation is left out.",
			yaml: edit("operations: [added, updated, deleted, synced]", "operations: [added, deleted]"),
			want: []string{"resources[0].snapshotInterval: Forbidden", `add "synced" to operations`},
		},
		{
			name: "A qps of zero is rejected instead of being defaulted.",
			yaml: edit("qps: 50", "qps: 0"),
			want: []string{"client.qps: Invalid value: 0: must be greater than 0"},
		},
		{
			name: "A negative qps is rejected.",
			yaml: edit("qps: 50", "qps: -5"),
			want: []string{"client.qps: Invalid value: -5: must be greater than 0"},
		},
		{
			name: "A burst below qps is rejected and names the qps.",
			yaml: edit("burst: 100", "burst: 10"),
			want: []string{"client.burst: Invalid value: 10: must be greater than or equal to qps (50)"},
		},
		{
			name: "A qps that is not a number is reported with its path.",
			yaml: edit("qps: 50", "qps: fifty"),
			want: []string{`client.qps: Invalid value: "fifty": must be a number`},
		},
		{
			name: "A shard count above the limit is rejected with the allowed range.",
			yaml: edit("dispatch:\n", "dispatch:\n  shards: 2000\n"),
			want: []string{"dispatch.shards: Invalid value: 2000: must be between 1 and 1024"},
		},
		{
			name: "A fractional batch size is a type error.",
			yaml: edit("dispatch:\n", "dispatch:\n  batchSize: 2.5\n"),
			want: []string{"dispatch.batchSize: Invalid value: 2.5: must be a whole number"},
		},
		{
			name: "An unsupported sink type lists the supported types.",
			yaml: edit("    type: stdout\n    stdout:\n      pretty: false\n", "    type: pulsar\n"),
			want: []string{`sinks[0].type: Unsupported value: "pulsar"`, "supported values: " + registered},
		},
		{
			name: "A block for a type other than the sink's type is forbidden.",
			yaml: edit("    type: stdout", "    type: kafka"),
			want: []string{`sinks[0].stdout: Forbidden: may only be set when type is "stdout" (type is "kafka")`},
		},
		{
			name: "A sink without a type is rejected.",
			yaml: edit("    type: stdout\n", ""),
			want: []string{"sinks[0].type: Required value", "supported types: " + registered},
		},
		{
			name: "A namespace that is not a DNS-1123 label is rejected.",
			yaml: edit("namespaces: [team-a, team-b]", "namespaces: [Team_A, team-b]"),
			want: []string{`resources[0].namespaces[0]: Invalid value: "Team_A"`, "RFC 1123 label"},
		},
		{
			name: "A namespace listed twice is a duplicate.",
			yaml: edit("namespaces: [team-a, team-b]", "namespaces: [team-a, team-b, team-a]"),
			want: []string{`resources[0].namespaces[2]: Duplicate value: "team-a"`},
		},
		{
			name: "An unquoted no in a list of strings is explained as a YAML boolean.",
			yaml: edit("namespaces: [team-a, team-b]", "namespaces: [team-a, no]"),
			want: []string{"resources[0].namespaces[1]: Invalid value: false: must be a string", "quote the value"},
		},
		{
			name: "Malformed YAML is reported with its line.",
			yaml: edit("    namespaces: [team-a, team-b]", "    namespaces: [team-a, team-b"),
			want: []string{"malformed YAML: line"},
		},
		{
			name: "A key repeated in one mapping is reported with its line.",
			yaml: edit("cluster: demo\n", "cluster: demo\ncluster: other\n"),
			want: []string{`duplicate key: line 4: key "cluster" already set in map`},
		},
		{
			name: "A file that is a list rather than a mapping is rejected.",
			yaml: "- apiVersion: kubewire.io/v1alpha1\n",
			want: []string{"must be a YAML mapping", "not a list"},
		},
		{
			name: "A file with two YAML documents is rejected.",
			yaml: base + "---\n" + base,
			want: []string{"the file holds 2 YAML documents"},
		},
		{
			name: "An empty file reports every required top-level field.",
			yaml: "",
			want: []string{"apiVersion: Required value", "kind: Required value", "cluster: Required value", "resources: Required value", "sinks: Required value"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse([]byte(tc.yaml), app.DefaultRegistry())
			if err == nil {
				t.Fatalf("Parse succeeded; want an error containing %q", tc.want)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config along with an error")
			}
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error is %T, want *config.Error: %v", err, err)
			}
			if len(cerr.Errors) == 0 {
				t.Fatalf("*config.Error has no entries")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error message lacks %q; got:\n%s", w, msg)
				}
			}
		})
	}
}

func TestAllIndependentErrorsAreReportedTogether(t *testing.T) {
	yaml := edit(
		"kind: Config", "kind: Config\ncolour: blue", // unknown field (decoding)
		"burst: 100", "burst: 1", // semantic: burst < qps
		"labelSelector: app=web", `labelSelector: "=="`, // semantic: bad selector
	)
	_, err := config.Parse([]byte(yaml), app.DefaultRegistry())
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("error is %T, want *config.Error: %v", err, err)
	}
	if len(cerr.Errors) != 3 {
		t.Fatalf("got %d errors, want 3:\n%v", len(cerr.Errors), err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want one per error:\n%v", len(lines), err)
	}
	for i, want := range []string{"colour: Forbidden: unknown field", "client.burst: Invalid value: 1", "resources[0].labelSelector: Invalid value: \"==\""} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want)
		}
	}
}

func TestLoadPrefixesEveryErrorLineWithTheFileName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubewire.yaml")
	if err := os.WriteFile(path, []byte(edit("cluster: demo", "cluster: BAD", "qps: 50", "qps: -1")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path, app.DefaultRegistry())
	// Wrapping must not hide the type from cmd/.
	wrapped := fmt.Errorf("validate: %w", err)
	var cerr *config.Error
	if !errors.As(wrapped, &cerr) {
		t.Fatalf("error is %T, want *config.Error: %v", err, err)
	}
	if cerr.File != path {
		t.Errorf("File = %q, want %q", cerr.File, path)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%v", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, path+": ") {
			t.Errorf("line %q lacks the file name prefix", l)
		}
	}
}

func TestLoadOfAMissingFileIsNotAConfigError(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "absent.yaml"), app.DefaultRegistry())
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	var cerr *config.Error
	if errors.As(err, &cerr) {
		t.Errorf("a read failure should not be a *config.Error: %v", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap os.ErrNotExist", err)
	}
}

const minimal = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: configmaps
    sinks: [out]
sinks:
  - name: out
    type: stdout
`

func TestOmittedFieldsGetTheirDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(minimal), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Client.QPS != 50 || cfg.Client.Burst != 100 {
		t.Errorf("client = %+v, want qps 50 burst 100", cfg.Client)
	}
	d := cfg.Dispatch
	if d.Shards != 16 || d.BufferEvents != 10000 || d.BatchSize != 100 || d.DrainTimeout.Duration != 30*time.Second {
		t.Errorf("dispatch = %+v, want 16/10000/100/30s", d)
	}
	r := cfg.Resources[0]
	if got := strings.Join(r.Operations, ","); got != "added,updated,deleted,synced" {
		t.Errorf("operations = %s, want all four", got)
	}
	if r.SnapshotInterval.Duration != 30*time.Minute {
		t.Errorf("snapshotInterval = %v, want 30m", r.SnapshotInterval)
	}
	if r.KeepManagedFields {
		t.Error("keepManagedFields defaulted to true")
	}
	if !r.AllNamespaces() {
		t.Error("a resource without namespaces should watch all namespaces")
	}
	if b, ok := cfg.Sinks[0].Block.(*stdout.Config); !ok || b.Pretty {
		t.Errorf("stdout block = %#v, want a non-nil block with pretty false", cfg.Sinks[0].Block)
	}
}

func TestAnOmittedBurstFollowsAQPSAboveTheDefaultBurst(t *testing.T) {
	cfg, err := config.Parse([]byte(minimal+"client:\n  qps: 250.5\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Client.Burst != 251 {
		t.Errorf("burst = %d, want 251", cfg.Client.Burst)
	}
}

func TestAZeroSnapshotIntervalDisablesPeriodicSnapshots(t *testing.T) {
	for _, v := range []string{"0", "0s", `"0"`} {
		t.Run("snapshotInterval "+v, func(t *testing.T) {
			yaml := strings.Replace(minimal, "    sinks: [out]\n", "    sinks: [out]\n    snapshotInterval: "+v+"\n", 1)
			cfg, err := config.Parse([]byte(yaml), app.DefaultRegistry())
			if err != nil {
				t.Fatal(err)
			}
			r := cfg.Resources[0]
			if r.SnapshotInterval.Duration != 0 {
				t.Errorf("snapshotInterval = %v, want 0", r.SnapshotInterval)
			}
			if !r.Emits(config.OpSynced) {
				t.Error("the initial snapshot should still be emitted")
			}
		})
	}
}

func TestExplicitValuesAreKept(t *testing.T) {
	cfg, err := config.Parse([]byte(base+"\n"), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Resources[0]
	if got, want := r.GVR(), (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}); got != want {
		t.Errorf("GVR = %v, want %v", got, want)
	}
	if r.AllNamespaces() || len(r.Namespaces) != 2 {
		t.Errorf("namespaces = %v, want [team-a team-b]", r.Namespaces)
	}
	if r.LabelSelector != "app=web" || r.FieldSelector != "metadata.name!=skip" {
		t.Errorf("selectors = %q %q", r.LabelSelector, r.FieldSelector)
	}
	if got := cfg.Resources[1].GVR(); got.Group != "demo.kubewire.io" || got.Resource != "widgets" {
		t.Errorf("GVR = %v", got)
	}
	if s, ok := cfg.Sink("out"); !ok || s.Type != stdout.Type {
		t.Errorf("Sink(out) = %+v, %v", s, ok)
	}
	if _, ok := cfg.Sink("missing"); ok {
		t.Error("Sink(missing) found something")
	}
}

func TestEmitsFollowsTheOperationsList(t *testing.T) {
	r := config.Resource{Operations: []string{config.OpAdded, config.OpDeleted}}
	for op, want := range map[string]bool{
		config.OpAdded: true, config.OpUpdated: false, config.OpDeleted: true, config.OpSynced: false, "bogus": false,
	} {
		if got := r.Emits(op); got != want {
			t.Errorf("Emits(%q) = %v, want %v", op, got, want)
		}
	}
	if !(config.Resource{}).Emits(config.OpUpdated) {
		t.Error("a resource with no operations list should emit everything")
	}
}

func TestTheEmbeddedExampleIsValid(t *testing.T) {
	cfg, err := config.Parse(config.ExampleYAML, app.DefaultRegistry())
	if err != nil {
		t.Fatalf("ExampleYAML: %v", err)
	}
	if cfg.Cluster != "demo" {
		t.Errorf("cluster = %q, want demo", cfg.Cluster)
	}
	var gvrs []string
	for _, r := range cfg.Resources {
		gvrs = append(gvrs, r.GVR().String())
		if !r.AllNamespaces() {
			t.Errorf("%s should watch all namespaces", r.GVR())
		}
	}
	want := "/v1, Resource=configmaps demo.kubewire.io/v1, Resource=widgets"
	if got := strings.Join(gvrs, " "); got != want {
		t.Errorf("resources = %s, want %s", got, want)
	}
	if len(cfg.Sinks) != 1 || cfg.Sinks[0].Type != stdout.Type {
		t.Errorf("sinks = %+v, want one stdout sink", cfg.Sinks)
	}
	if d := config.Default(app.DefaultRegistry()); d.Cluster != "demo" {
		t.Errorf("Default().Cluster = %q", d.Cluster)
	}
}

func TestAConfigBuiltInCodeCanBeDefaultedAndValidated(t *testing.T) {
	cfg := &config.Config{
		APIVersion: config.APIVersion,
		Kind:       config.Kind,
		Cluster:    "demo",
		Resources: []config.Resource{{
			Version: "v1", Resource: "secrets", Sinks: []string{"out"},
			SnapshotInterval: config.NewDuration(0),
		}},
		Sinks: []config.Sink{{Name: "out", Type: stdout.Type}},
	}
	if err := cfg.Validate(); err == nil {
		t.Error("validation before defaulting should fail (qps 0)")
	}
	cfg.ApplyDefaults()
	cfg.ApplyDefaults() // idempotent
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if cfg.Resources[0].SnapshotInterval.Duration != 0 {
		t.Errorf("an explicit zero snapshotInterval was replaced by %v", cfg.Resources[0].SnapshotInterval)
	}
	if cfg.Dispatch.DrainTimeout.Duration != config.DefaultDrainTimeout {
		t.Errorf("drainTimeout = %v", cfg.Dispatch.DrainTimeout)
	}
}

func TestSupportedListsAreCopies(t *testing.T) {
	config.Operations()[0] = "mutated"
	if config.Operations()[0] != config.OpAdded {
		t.Error("callers can change the package's supported lists")
	}
}
