package packaging_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/tools/packaging"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

// valuesSet is one way to install the chart, with what RBAC it must produce.
type valuesSet struct {
	name   string
	values string
	// clusterRules are the resources ("group/resource") the ClusterRole
	// must grant get, list and watch on; empty means no ClusterRole.
	clusterRules []string
	// roleRules are the same per namespace, for Roles.
	roleRules map[string][]string
	// leaderElection says whether --leader-elect and the Lease Role appear.
	leaderElection bool
	// noCheckpoint: checkpoint.enabled is false, so the args pass
	// --checkpoint=off and no checkpoint Role may appear.
	noCheckpoint bool
	// noRBAC: rbac.create is false, so no RBAC object may appear.
	noRBAC bool
	// kinds must all be among the rendered objects.
	kinds []string
}

// valuesSets lists the installs the tests render. Namespaces the config
// watches are parameters so that the cluster tests can use fresh ones.
func valuesSets(nsA, nsB string) []valuesSet {
	return []valuesSet{
		{
			name:         "the defaults watch deployments in every namespace through a ClusterRole",
			values:       ``,
			clusterRules: []string{"apps/deployments"},
			kinds:        []string{"ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"},
		},
		{
			name: "resources each watched in one namespace get a Role there and no ClusterRole",
			values: fmt.Sprintf(`
config:
  cluster: shop-eu-1
  resources:
    - version: v1
      resource: configmaps
      namespaces: [%[1]s]
      sinks: [out]
    - group: apps
      version: v1
      resource: deployments
      namespaces: [%[1]s]
      sinks: [out]
    - group: example.com
      version: v1
      resource: widgets
      namespaces: [%[2]s]
      sinks: [out]
  sinks:
    - name: out
      type: stdout
`, nsA, nsB),
			roleRules: map[string][]string{nsA: {"/configmaps", "apps/deployments"}, nsB: {"example.com/widgets"}},
			kinds:     []string{"Role", "RoleBinding"},
		},
		{
			name: "a resource watched in several namespaces is read cluster-wide because kubewire lists it once for all of them",
			values: fmt.Sprintf(`
config:
  cluster: shop-eu-1
  resources:
    - version: v1
      resource: configmaps
      namespaces: [%[1]s, %[2]s]
      sinks: [out]
    - group: batch
      version: v1
      resource: jobs
      namespaces: [%[2]s]
      sinks: [out]
    - version: v1
      resource: nodes
      namespaces: []
      sinks: [out]
  sinks:
    - name: out
      type: stdout
`, nsA, nsB),
			clusterRules: []string{"/configmaps", "/nodes"},
			roleRules:    map[string][]string{nsB: {"batch/jobs"}},
		},
		{
			name: "secrets watched in several namespaces get a Role in each, never a cluster-wide read of Secrets",
			values: fmt.Sprintf(`
config:
  cluster: shop-eu-1
  resources:
    - version: v1
      resource: secrets
      namespaces: [%[1]s, %[2]s]
      sinks: [out]
    - version: v1
      resource: configmaps
      namespaces: [%[1]s]
      sinks: [out]
  sinks:
    - name: out
      type: stdout
`, nsA, nsB),
			roleRules: map[string][]string{nsA: {"/secrets", "/configmaps"}, nsB: {"/secrets"}},
			kinds:     []string{"Role", "RoleBinding"},
		},
		{
			name: "watchPerNamespace decides between a Role in each namespace and a ClusterRole",
			values: fmt.Sprintf(`
config:
  cluster: shop-eu-1
  resources:
    - version: v1
      resource: configmaps
      namespaces: [%[1]s, %[2]s]
      watchPerNamespace: true
      sinks: [out]
    - version: v1
      resource: secrets
      namespaces: [%[1]s, %[2]s]
      watchPerNamespace: false
      sinks: [out]
    - group: apps
      version: v1
      resource: deployments
      namespaces: [%[2]s]
      watchPerNamespace: false
      sinks: [out]
  sinks:
    - name: out
      type: stdout
`, nsA, nsB),
			clusterRules: []string{"/secrets"},
			roleRules:    map[string][]string{nsA: {"/configmaps"}, nsB: {"/configmaps", "apps/deployments"}},
		},
		{
			name: "a discover entry is granted the core resources one by one, never secrets, and per-group reads elsewhere",
			values: `
config:
  cluster: shop-eu-1
  resources:
    - discover:
        groups: ["", "apps", "example.com", "*.k8s.io"]
        resources: ["*"]
      sinks: [out]
    - {version: v1, resource: configmaps, sinks: [out]}
  sinks:
    - name: out
      type: stdout
rbac:
  discover:
    coreResources: [configmaps, pods, secrets]
    groups: [apps, batch, networking.k8s.io, storage.k8s.io]
`,
			clusterRules: []string{"apiextensions.k8s.io/customresourcedefinitions", "/configmaps", "/pods",
				"apps/*", "example.com/*", "networking.k8s.io/*", "storage.k8s.io/*"},
		},
		{
			name: "a discover entry gets a full wildcard only when asked",
			values: `
config:
  cluster: shop-eu-1
  resources:
    - discover: {}
      sinks: [out]
  sinks:
    - name: out
      type: stdout
rbac:
  discover:
    wildcard: true
`,
			clusterRules: []string{"apiextensions.k8s.io/customresourcedefinitions", "*/*"},
		},
		{
			name:           "two replicas turn on leader election, its Lease Role and a PodDisruptionBudget",
			values:         `replicaCount: 2`,
			clusterRules:   []string{"apps/deployments"},
			leaderElection: true,
			kinds:          []string{"PodDisruptionBudget", "Role", "RoleBinding"},
		},
		{
			name: "a kafka sink reads its SASL password and CA from a Secret mounted as files",
			values: `
config:
  cluster: prod
  resources:
    - group: apps
      version: v1
      resource: deployments
      sinks: [kafka]
  sinks:
    - name: kafka
      type: kafka
      kafka:
        brokers: ["kafka-0.kafka:9093", "kafka-1.kafka:9093"]
        tls:
          caFile: /var/run/secrets/kubewire/kafka/ca.crt
        sasl:
          mechanism: SCRAM-SHA-512
          username: kubewire
          passwordFile: /var/run/secrets/kubewire/kafka/password
secretMounts:
  - name: kafka
    secretName: kubewire-kafka
    mountPath: /var/run/secrets/kubewire/kafka
`,
			clusterRules: []string{"apps/deployments"},
		},
		{
			name: "a nats sink reads its credentials file and client certificate from two Secrets",
			values: `
config:
  cluster: prod
  resources:
    - version: v1
      resource: services
      sinks: [nats]
  sinks:
    - name: nats
      type: nats
      nats:
        servers: ["tls://nats.messaging:4222"]
        auth:
          credsFile: /var/run/secrets/kubewire/nats-creds/kubewire.creds
        tls:
          caFile: /var/run/secrets/kubewire/nats-tls/ca.crt
          certFile: /var/run/secrets/kubewire/nats-tls/tls.crt
          keyFile: /var/run/secrets/kubewire/nats-tls/tls.key
secretMounts:
  - name: nats-creds
    secretName: kubewire-nats-user
    mountPath: /var/run/secrets/kubewire/nats-creds
    items:
      - key: user.creds
        path: kubewire.creds
  - name: nats-tls
    secretName: kubewire-nats-tls
    mountPath: /var/run/secrets/kubewire/nats-tls
    defaultMode: 256
`,
			clusterRules: []string{"/services"},
		},
		{
			name: "every optional object appears when asked for",
			values: `
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: prometheus}
prometheusRule:
  enabled: true
  labels: {release: prometheus}
  alertLabels: {team: platform}
  disabledAlerts: [KubewireKafkaProduceSlow]
  staleAfter: {deployments.apps: 6h}
dashboard:
  enabled: true
networkPolicy:
  enabled: true
  metricsFrom:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: monitoring}
  egress:
    - ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
    - ports: [{port: 443, protocol: TCP}, {port: 6443, protocol: TCP}]
podAnnotations: {example.com/team: platform}
podLabels: {team: platform}
nodeSelector: {kubernetes.io/os: linux}
tolerations:
  - {key: dedicated, operator: Equal, value: platform, effect: NoSchedule}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}]
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {app.kubernetes.io/name: kubewire}
imagePullSecrets: [{name: registry}]
priorityClassName: platform-high
`,
			clusterRules: []string{"apps/deployments"},
			kinds:        []string{"ServiceMonitor", "PrometheusRule", "NetworkPolicy", "ConfigMap"},
		},
		{
			name: "a spool kept on a PersistentVolumeClaim for sinks that spool and one that conflates",
			values: `
config:
  cluster: prod
  dispatch: {bufferBytes: 16777216}
  resources:
    - group: apps
      version: v1
      resource: deployments
      sinks: [audit, live]
  sinks:
    - name: audit
      type: stdout
      overflow: spool
      spool: {maxBytes: 2147483648, fsync: always}
    - name: live
      type: stdout
      overflow: conflate
spool:
  persistence:
    enabled: true
    size: 3Gi
    storageClass: standard
`,
			clusterRules: []string{"apps/deployments"},
			kinds:        []string{"PersistentVolumeClaim"},
		},
		{
			name: "an existing ServiceAccount with RBAC granted elsewhere renders no RBAC",
			values: `
serviceAccount: {create: false, name: platform-kubewire}
rbac: {create: false}
replicaCount: 3
`,
			noRBAC:         true,
			leaderElection: true,
		},
		{
			name:           "checkpoint.enabled false turns the checkpoint off and grants no Lease for it",
			values:         `{checkpoint: {enabled: false}, leaderElection: {enabled: true}}`,
			clusterRules:   []string{"apps/deployments"},
			leaderElection: true,
			noCheckpoint:   true,
		},
	}
}

func TestChartRendersForEveryValuesSet(t *testing.T) {
	for _, vs := range valuesSets("team-a", "team-b") {
		t.Run(vs.name, func(t *testing.T) {
			r := render(t, "kw", "platform", vs.values)
			checkKinds(t, r, vs)
			checkRBAC(t, r, vs, "kw", "platform")
			checkDeployment(t, r, vs)
			checkConfigLoads(t, r)
			if r.Notes == "" {
				t.Error("NOTES.txt rendered empty")
			}
		})
	}
}

func kindsOf(r *packaging.Rendered) []string {
	var kinds []string
	for _, m := range r.Manifests {
		kinds = append(kinds, m.Object.GetKind())
	}
	return kinds
}

func checkKinds(t *testing.T, r *packaging.Rendered, vs valuesSet) {
	t.Helper()
	kinds := kindsOf(r)
	for _, k := range vs.kinds {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s rendered; got %v", k, kinds)
		}
	}
	replicas, _, _ := unstructured.NestedInt64(deployment(t, r).Object, "spec", "replicas")
	if pdb := slices.Contains(kinds, "PodDisruptionBudget"); pdb != (replicas > 1) {
		t.Errorf("PodDisruptionBudget rendered: %v with %d replicas; want one exactly when there is more than one replica", pdb, replicas)
	}
	for _, m := range r.Manifests {
		o := m.Object
		if o.GetLabels()["app.kubernetes.io/name"] != "kubewire" || o.GetLabels()["app.kubernetes.io/instance"] == "" {
			t.Errorf("%s %s lacks the standard app.kubernetes.io labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
}

// rbacKinds are the kinds that grant anything.
var rbacKinds = []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// checkRBAC asserts that the chart grants exactly what vs says: read rules
// for the configured resources at the right scope, the Lease rules when
// leader election is on, each bound to the chart's ServiceAccount alone.
func checkRBAC(t *testing.T, r *packaging.Rendered, vs valuesSet, release, ns string) {
	t.Helper()
	if vs.noRBAC {
		for _, k := range rbacKinds {
			if objs := r.Objects(k); len(objs) > 0 {
				t.Errorf("rbac.create is false but a %s %s was rendered", k, objs[0].GetName())
			}
		}
		return
	}
	readVerbs := []string{"get", "list", "watch"}

	// ClusterRoles: at most one, holding exactly the cluster-wide reads.
	crs := r.Objects("ClusterRole")
	switch {
	case len(vs.clusterRules) == 0 && len(crs) > 0:
		t.Errorf("no resource needs cluster-wide reads, but ClusterRole %s was rendered", crs[0].GetName())
	case len(vs.clusterRules) > 0 && len(crs) != 1:
		t.Errorf("want one ClusterRole, got %d", len(crs))
	case len(vs.clusterRules) > 0:
		if got := readRules(t, crs[0], readVerbs); !slices.Equal(got, vs.clusterRules) {
			t.Errorf("ClusterRole grants get/list/watch on %v, want exactly %v", got, vs.clusterRules)
		}
	}

	leaseRole, checkpointRole := "kw-kubewire-leader-election", "kw-kubewire-checkpoint"
	roles := map[string][]string{}
	var sawLease, sawCheckpoint bool
	for _, role := range r.Objects("Role") {
		switch role.GetName() {
		case leaseRole:
			sawLease = true
			checkLeaseRole(t, role, ns, "kw-kubewire")
			continue
		case checkpointRole:
			sawCheckpoint = true
			checkCheckpointRole(t, role, ns, "kw-kubewire-checkpoint")
			continue
		}
		if _, dup := roles[role.GetNamespace()]; dup {
			t.Errorf("two Roles in namespace %s", role.GetNamespace())
		}
		roles[role.GetNamespace()] = readRules(t, role, readVerbs)
	}
	want := vs.roleRules
	if want == nil {
		want = map[string][]string{}
	}
	if !maps.EqualFunc(roles, want, slices.Equal) {
		t.Errorf("Roles grant %v, want exactly %v", roles, want)
	}
	if sawLease != vs.leaderElection {
		t.Errorf("Lease Role rendered: %v, want %v", sawLease, vs.leaderElection)
	}
	if sawCheckpoint == vs.noCheckpoint {
		t.Errorf("checkpoint Role rendered: %v, want %v", sawCheckpoint, !vs.noCheckpoint)
	}

	// Every role has exactly one binding of the same name, to the chart's
	// ServiceAccount and nothing else.
	bound := map[string]bool{}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, b := range r.Objects(kind) {
			roleKind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
			roleName, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
			bound[roleKind+"/"+b.GetNamespace()+"/"+roleName] = true
			subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
			wantSubject := map[string]any{"kind": "ServiceAccount", "name": release + "-kubewire", "namespace": ns}
			if len(subjects) != 1 || !maps.Equal(subjects[0].(map[string]any), wantSubject) {
				t.Errorf("%s %s binds %v, want only %v", kind, b.GetName(), subjects, wantSubject)
			}
		}
	}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, role := range r.Objects(kind) {
			if !bound[kind+"/"+role.GetNamespace()+"/"+role.GetName()] {
				t.Errorf("%s %s/%s is not bound", kind, role.GetNamespace(), role.GetName())
			}
		}
	}
}

// readRules returns "group/resource" for every rule of role, failing unless
// each grants exactly verbs, on one group and resource, with no resource
// names or non-resource URLs.
func readRules(t *testing.T, role *unstructured.Unstructured, verbs []string) []string {
	t.Helper()
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var out []string
	for i, raw := range rules {
		rule := raw.(map[string]any)
		groups, _, _ := unstructured.NestedStringSlice(rule, "apiGroups")
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		gotVerbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
		if len(groups) != 1 || len(resources) != 1 || !slices.Equal(gotVerbs, verbs) || len(rule) != 3 {
			t.Errorf("%s %s rule %d is not a plain %v on one resource: %v", role.GetKind(), role.GetName(), i, verbs, rule)
			continue
		}
		out = append(out, groups[0]+"/"+resources[0])
	}
	return out
}

// checkLeaseRole asserts the Lease rules: create (which RBAC cannot limit
// by name) and get/update of this release's Lease only.
func checkLeaseRole(t *testing.T, role *unstructured.Unstructured, ns, id string) {
	t.Helper()
	if role.GetNamespace() != ns {
		t.Errorf("Lease Role in namespace %q, want the release namespace %q", role.GetNamespace(), ns)
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	want := []map[string]any{
		{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}},
		{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "resourceNames": []any{id}, "verbs": []any{"get", "update"}},
	}
	if fmt.Sprint(rules) != fmt.Sprint(want) {
		t.Errorf("Lease Role rules:\n%v\nwant exactly:\n%v", rules, want)
	}
}

// checkCheckpointRole asserts the checkpoint rules: create of Leases (which
// RBAC cannot limit by name) and get/update of this release's checkpoint
// Lease only.
func checkCheckpointRole(t *testing.T, role *unstructured.Unstructured, ns, name string) {
	t.Helper()
	if role.GetNamespace() != ns {
		t.Errorf("checkpoint Role in namespace %q, want the release namespace %q", role.GetNamespace(), ns)
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	want := []map[string]any{
		{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}},
		{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "resourceNames": []any{name}, "verbs": []any{"get", "update"}},
	}
	if fmt.Sprint(rules) != fmt.Sprint(want) {
		t.Errorf("checkpoint Role rules:\n%v\nwant exactly:\n%v", rules, want)
	}
}

// deployment returns the single rendered Deployment.
func deployment(t *testing.T, r *packaging.Rendered) *unstructured.Unstructured {
	t.Helper()
	ds := r.Objects("Deployment")
	if len(ds) != 1 {
		t.Fatalf("want one Deployment, got %d", len(ds))
	}
	return ds[0]
}

// container returns the Deployment's kubewire container.
func container(t *testing.T, d *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("want one container, got %d", len(cs))
	}
	return cs[0].(map[string]any)
}

func checkDeployment(t *testing.T, r *packaging.Rendered, vs valuesSet) {
	t.Helper()
	d := deployment(t, r)
	c := container(t, d)
	args, _, _ := unstructured.NestedStringSlice(c, "args")

	// The args must be a command line the real CLI accepts.
	checkArgsParse(t, args)
	elect := slices.Contains(args, "--leader-elect")
	if elect != vs.leaderElection {
		t.Errorf("--leader-elect in args: %v, want %v (args %v)", elect, vs.leaderElection, args)
	}
	if elect && !slices.Contains(args, "--leader-election-id=kw-kubewire") {
		t.Errorf("leader election id is not the release's full name: %v", args)
	}
	// The checkpoint is the Lease the checkpoint Role names, in the release
	// namespace; off, it is off even with --leader-elect, which would
	// otherwise pick one.
	want := "--checkpoint=" + d.GetNamespace() + "/kw-kubewire-checkpoint"
	if vs.noCheckpoint {
		want = "--checkpoint=off"
	}
	if got := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, "--checkpoint") }); !slices.Equal(got, []string{want}) {
		t.Errorf("args pass %v, want exactly %s", got, want)
	}

	sc, _, _ := unstructured.NestedMap(c, "securityContext")
	for path, want := range map[string]any{
		"runAsNonRoot": true, "runAsUser": int64(65532), "readOnlyRootFilesystem": true,
		"allowPrivilegeEscalation": false, "capabilities.drop": []any{"ALL"}, "seccompProfile.type": "RuntimeDefault",
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(sc, strings.Split(path, ".")...)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("container securityContext.%s = %v, want %v", path, got, want)
		}
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		got, _, _ := unstructured.NestedString(c, probe, "httpGet", "path")
		port, _, _ := unstructured.NestedString(c, probe, "httpGet", "port")
		if got != path || port != "metrics" {
			t.Errorf("%s probes %s on port %q, want %s on the metrics port", probe, got, port, path)
		}
	}
	if sum, _, _ := unstructured.NestedString(d.Object, "spec", "template", "metadata", "annotations", "checksum/config"); len(sum) != 64 {
		t.Errorf("no config checksum on the pod template, so a config change would not roll the pods")
	}
	checkSecretMounts(t, r, d.Object, c)
	checkSpool(t, r, d.Object, c)
}

// spoolDir is where the chart mounts the spool volume.
const spoolDir = "/var/lib/kubewire/spool"

// checkSpool asserts that the spool has a writable volume of its own at
// spoolDir (a claim exactly when spool.persistence is on), that the
// rendered config points kubewire at it, and that the root filesystem stays
// read-only, so the spool is the only place kubewire can write.
func checkSpool(t *testing.T, r *packaging.Rendered, d, c map[string]any) {
	t.Helper()
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	var mount map[string]any
	for _, m := range mounts {
		if m := m.(map[string]any); m["name"] == "spool" {
			mount = m
		}
	}
	if mount == nil || mount["mountPath"] != spoolDir || mount["readOnly"] == true {
		t.Errorf("no writable spool mount at %s: %v", spoolDir, mounts)
	}
	if ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !ro {
		t.Error("the root filesystem is writable; only the spool should be")
	}
	v := podVolume(t, d, "spool")
	claims := r.Objects("PersistentVolumeClaim")
	if claim, ok, _ := unstructured.NestedString(v, "persistentVolumeClaim", "claimName"); ok {
		// No claim rendered means spool.persistence.existingClaim.
		if len(claims) > 1 || len(claims) == 1 && claims[0].GetName() != claim {
			t.Errorf("the spool volume uses claim %q, but the chart rendered %d claims", claim, len(claims))
		}
	} else {
		if _, ok := v["emptyDir"]; !ok {
			t.Errorf("the spool volume is neither an emptyDir nor a claim: %v", v)
		}
		if limit, _, _ := unstructured.NestedString(v, "emptyDir", "sizeLimit"); limit == "" {
			t.Errorf("the spool emptyDir has no sizeLimit, so a full spool could fill the node's disk: %v", v)
		}
		if len(claims) > 0 {
			t.Errorf("the spool is an emptyDir, but a claim %s was rendered too", claims[0].GetName())
		}
	}
	cfg, err := config.Parse([]byte(configText(t, r)), app.DefaultRegistry())
	if err != nil {
		return // checkConfigLoads reports it
	}
	if cfg.Dispatch.SpoolDir != spoolDir {
		t.Errorf("the rendered config spools to %q, not to the volume at %s", cfg.Dispatch.SpoolDir, spoolDir)
	}
}

// podVolume returns the pod template's volume called name.
func podVolume(t *testing.T, d map[string]any, name string) map[string]any {
	t.Helper()
	volumes, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		if v := v.(map[string]any); v["name"] == name {
			return v
		}
	}
	t.Fatalf("no volume %q among %v", name, volumes)
	return nil
}

// checkArgsParse feeds the Deployment's args to kubewire's own command line,
// so the chart never passes a flag the binary does not have.
func checkArgsParse(t *testing.T, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("args do not start with the run command: %v", args)
	}
	root := cli.NewRoot(nil, nil)
	cmd, rest, err := root.Find(args)
	if err != nil || cmd.Name() != "run" {
		t.Fatalf("kubewire does not find the run command in %v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("kubewire run rejects the chart's args %v: %v", rest, err)
	}
}

// checkSecretMounts asserts that every secretMount becomes a read-only
// volume (every volume but the spool is read-only), and that every file the
// config names (the *File fields) lives in one of them, the config's own
// mount or the base image's CA bundle.
func checkSecretMounts(t *testing.T, r *packaging.Rendered, d, c map[string]any) {
	t.Helper()
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	volumes, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "volumes")
	var dirs []string
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["name"] == "spool" {
			continue // checkSpool
		}
		if m["readOnly"] != true {
			t.Errorf("volume mount %v is writable", m)
		}
		dirs = append(dirs, m["mountPath"].(string)+"/")
	}
	if len(volumes) != len(mounts) {
		t.Errorf("%d volumes but %d mounts", len(volumes), len(mounts))
	}
	for _, file := range configFiles(t, r) {
		if !slices.ContainsFunc(dirs, func(dir string) bool { return strings.HasPrefix(file, dir) }) {
			t.Errorf("the config reads %s, which no volume mount (%v) provides", file, dirs)
		}
	}
}

// configText returns config.yaml from the rendered ConfigMap.
func configText(t *testing.T, r *packaging.Rendered) string {
	t.Helper()
	for _, cm := range r.Objects("ConfigMap") {
		if text, ok, _ := unstructured.NestedString(cm.Object, "data", "config.yaml"); ok {
			return text
		}
	}
	t.Fatal("no ConfigMap holds config.yaml")
	return ""
}

// checkConfigLoads runs the rendered config through kubewire's own strict
// loader: whatever the chart writes, kubewire must start with.
func checkConfigLoads(t *testing.T, r *packaging.Rendered) {
	t.Helper()
	text := configText(t, r)
	if _, err := config.Parse([]byte(text), app.DefaultRegistry()); err != nil {
		t.Errorf("kubewire rejects the rendered config:\n%v\n%s", err, text)
	}
}

// configFiles lists the values of every field of the rendered config whose
// name ends in "File".
func configFiles(t *testing.T, r *packaging.Rendered) []string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(configText(t, r)), &cfg); err != nil {
		t.Fatal(err)
	}
	var files []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && strings.HasSuffix(k, "File") && s != "" {
					files = append(files, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(cfg)
	slices.Sort(files)
	return files
}
