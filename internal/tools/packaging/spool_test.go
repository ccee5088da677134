package packaging_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// sinksConfig is a config whose sinks are the YAML flow mappings given.
func sinksConfig(sinks ...string) string {
	return fmt.Sprintf(`
config:
  apiVersion: kubewire.io/v1alpha1
  kind: Config
  cluster: prod
  resources: [{group: apps, version: v1, resource: deployments, sinks: [%s]}]
  sinks:
    - %s
`, strings.Join(sinkNames(len(sinks)), ", "), strings.Join(sinks, "\n    - "))
}

func sinkNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	return names
}

// spoolVolume renders y and returns the pod's spool volume.
func spoolVolume(t *testing.T, y string) (*packaging.Rendered, map[string]any) {
	t.Helper()
	r := render(t, "kw", "platform", y)
	checkConfigLoads(t, r)
	d := deployment(t, r)
	checkSpool(t, r, d.Object, container(t, d))
	return r, podVolume(t, d.Object, "spool")
}

func TestTheSpoolEmptyDirIsSizedFromTheSinksThatSpoolWithAQuarterToSpare(t *testing.T) {
	// The chart assumes kubewire's default spool.maxBytes; if that changes,
	// so must kubewire.spoolBytes in _helpers.tpl.
	defaultLimit := fmt.Sprintf("%dMi", (config.DefaultSpoolMaxBytes*5/4+(1<<20)-1)>>20)
	for _, tc := range []struct {
		name, values, want string
	}{
		{"the chart's default stdout sink spools up to the default maxBytes", ``, defaultLimit},
		{"two sinks with the default maxBytes need twice that", sinksConfig(
			`{name: s0, type: stdout}`,
			`{name: s1, type: stdout, overflow: spool}`), "2560Mi"},
		{"a sink that conflates writes nothing to disk", sinksConfig(
			`{name: s0, type: stdout, spool: {maxBytes: 104857600, fsync: always}}`,
			`{name: s1, type: stdout, overflow: conflate, spool: {maxBytes: 1099511627776}}`), "125Mi"},
		{"with no sink spooling the volume keeps a small floor", sinksConfig(
			`{name: s0, type: stdout, overflow: conflate}`), "64Mi"},
		{"a given sizeLimit at least what the sinks may spool is used as it is", `spool: {sizeLimit: 5Gi}`, "5Gi"},
		{"a given sizeLimit exactly what the sinks may spool is enough", sinksConfig(
			`{name: s0, type: stdout, spool: {maxBytes: 1000000000}}`) + `
spool: {sizeLimit: 1G}`, "1G"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, v := spoolVolume(t, tc.values)
			if got, _, _ := unstructured.NestedString(v, "emptyDir", "sizeLimit"); got != tc.want {
				t.Errorf("spool emptyDir sizeLimit %q, want %q", got, tc.want)
			}
		})
	}
}

func TestASpoolVolumeSmallerThanTheSinksMaySpoolIsRefusedBeforeInstall(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"an emptyDir the pod would be evicted for outgrowing", sinksConfig(
			`{name: s0, type: stdout}`, `{name: s1, type: stdout}`) + `
spool: {sizeLimit: 2000Mi}`,
			[]string{"spool.sizeLimit 2000Mi", "2097152000 bytes", "2147483648 bytes", "evict"}},
		{"a claim the spool cannot fit in", sinksConfig(
			`{name: s0, type: stdout, spool: {maxBytes: 4294967296}}`) + `
spool: {persistence: {enabled: true}}`,
			[]string{"spool.persistence.size 2Gi", "4294967296 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refusesToRender(t, tc.values, tc.want) })
	}
}

func TestASpoolOnAClaimIsUsedByOnePodAtATime(t *testing.T) {
	t.Run("the chart creates a claim and replaces the pod rather than rolling it", func(t *testing.T) {
		r, v := spoolVolume(t, `
spool:
  persistence:
    enabled: true
    size: 10Gi
    storageClass: fast-ssd
    annotations: {helm.sh/resource-policy: keep}
`)
		claims := r.Objects("PersistentVolumeClaim")
		if len(claims) != 1 {
			t.Fatalf("want one PersistentVolumeClaim, got %d", len(claims))
		}
		pvc := claims[0]
		if got, _, _ := unstructured.NestedString(v, "persistentVolumeClaim", "claimName"); got != "kw-kubewire-spool" || pvc.GetName() != got {
			t.Errorf("the spool volume claims %q; the chart's claim is %q, want kw-kubewire-spool", got, pvc.GetName())
		}
		for path, want := range map[string]any{
			"spec.resources.requests.storage": "10Gi",
			"spec.storageClassName":           "fast-ssd",
			"spec.accessModes":                []any{"ReadWriteOnce"},
			"metadata.namespace":              "platform",
			"metadata.annotations":            map[string]any{"helm.sh/resource-policy": "keep"},
		} {
			got, _, _ := unstructured.NestedFieldNoCopy(pvc.Object, strings.Split(path, ".")...)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("claim %s = %v, want %v", path, got, want)
			}
		}
		if got, _, _ := unstructured.NestedString(deployment(t, r).Object, "spec", "strategy", "type"); got != "Recreate" {
			t.Errorf("strategy %q, want Recreate: a rolling update would run two pods on one spool", got)
		}
	})
	t.Run("storageClass - asks for no class rather than the cluster's default", func(t *testing.T) {
		r, _ := spoolVolume(t, `spool: {persistence: {enabled: true, storageClass: "-"}}`)
		sc, ok, _ := unstructured.NestedString(r.Objects("PersistentVolumeClaim")[0].Object, "spec", "storageClassName")
		if !ok || sc != "" {
			t.Errorf("storageClassName %q (set: %v), want an explicit empty string", sc, ok)
		}
	})
	t.Run("without a storageClass the cluster's default class is used", func(t *testing.T) {
		r, _ := spoolVolume(t, `spool: {persistence: {enabled: true}}`)
		if _, ok, _ := unstructured.NestedFieldNoCopy(r.Objects("PersistentVolumeClaim")[0].Object, "spec", "storageClassName"); ok {
			t.Error("storageClassName is set, so the cluster's default class would not apply")
		}
	})
	t.Run("an existing claim is mounted and none is created", func(t *testing.T) {
		r, v := spoolVolume(t, `spool: {persistence: {enabled: true, existingClaim: kubewire-audit-spool}}`)
		if got, _, _ := unstructured.NestedString(v, "persistentVolumeClaim", "claimName"); got != "kubewire-audit-spool" {
			t.Errorf("the spool volume claims %q, want kubewire-audit-spool", got)
		}
		if n := len(r.Objects("PersistentVolumeClaim")); n != 0 {
			t.Errorf("%d claims rendered alongside an existing claim", n)
		}
	})
	t.Run("a strategy given explicitly as Recreate is kept", func(t *testing.T) {
		r, _ := spoolVolume(t, `
spool: {persistence: {enabled: true}}
updateStrategy: {type: Recreate}
`)
		if got, _, _ := unstructured.NestedString(deployment(t, r).Object, "spec", "strategy", "type"); got != "Recreate" {
			t.Errorf("strategy %q, want Recreate", got)
		}
	})
	t.Run("the default emptyDir keeps Kubernetes' rolling update", func(t *testing.T) {
		r, _ := spoolVolume(t, ``)
		if s, ok, _ := unstructured.NestedMap(deployment(t, r).Object, "spec", "strategy"); ok {
			t.Errorf("strategy %v set without persistence", s)
		}
	})
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"several replicas cannot share one claim", `
replicaCount: 2
spool: {persistence: {enabled: true}}`,
			[]string{"spool.persistence.enabled with replicaCount 2", "emptyDir"}},
		{"a rolling update cannot run two pods on one claim", `
updateStrategy: {type: RollingUpdate}
spool: {persistence: {enabled: true}}`,
			[]string{"updateStrategy.type RollingUpdate", "Recreate"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refusesToRender(t, tc.values, tc.want) })
	}
}

func TestTheRenderedConfigSpoolsToTheVolumeAndNowhereElse(t *testing.T) {
	t.Run("a spoolDir naming the volume's path is kept", func(t *testing.T) {
		spoolVolume(t, `
config:
  apiVersion: kubewire.io/v1alpha1
  kind: Config
  cluster: prod
  dispatch: {spoolDir: /var/lib/kubewire/spool/, bufferBytes: 8388608}
  resources: [{group: apps, version: v1, resource: deployments, sinks: [out]}]
  sinks: [{name: out, type: stdout}]
`)
	})
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"a spoolDir elsewhere would be on the read-only root filesystem", `
config: {dispatch: {spoolDir: /data/spool}}`,
			[]string{`config.dispatch.spoolDir "/data/spool"`, "/var/lib/kubewire/spool"}},
		{"a secret mounted over the spool", `
secretMounts: [{name: certs, secretName: certs, mountPath: /var/lib/kubewire/spool/certs}]`,
			[]string{"secretMounts[0].mountPath", "/var/run/secrets/kubewire/certs"}},
		{"a secret mounted above the spool", `
secretMounts: [{name: certs, secretName: certs, mountPath: /var/lib/kubewire}]`,
			[]string{"secretMounts[0].mountPath", "where the spool is mounted"}},
		{"a secret mount cannot take the spool volume's name", `
secretMounts: [{name: spool, secretName: certs, mountPath: /var/run/secrets/kubewire/spool}]`,
			[]string{"secretMounts[0].name", "already used"}},
	} {
		t.Run(tc.name, func(t *testing.T) { refusesToRender(t, tc.values, tc.want) })
	}
}

// TestTheSchemaAllowsTheOverflowAndFsyncPoliciesKubewireHas keeps the
// schema's enums in step with internal/base/config, which names the policies.
func TestTheSchemaAllowsTheOverflowAndFsyncPoliciesKubewireHas(t *testing.T) {
	var schema map[string]any
	readJSON(t, filepath.Join(chartDir, "values.schema.json"), &schema)
	sink := []string{"properties", "config", "properties", "sinks", "items", "properties"}
	for _, tc := range []struct {
		path []string
		want []string
	}{
		{append(slices.Clone(sink), "overflow"), []string{config.OverflowSpool, config.OverflowConflate}},
		{append(slices.Clone(sink), "spool", "properties", "fsync"), []string{config.FsyncAlways, config.FsyncInterval, config.FsyncNever}},
	} {
		node := schema
		for _, p := range tc.path {
			node = node[p].(map[string]any)
		}
		var got []string
		for _, v := range node["enum"].([]any) {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("values.schema.json %s allows %v; kubewire has %v", strings.Join(tc.path, "."), got, tc.want)
		}
	}
	// And a config using every new field renders and loads.
	spoolVolume(t, sinksConfig(
		`{name: s0, type: stdout, overflow: spool, spool: {maxBytes: 1073741824, fsync: always}}`,
		`{name: s1, type: stdout, overflow: spool, spool: {fsync: interval}}`,
		`{name: s2, type: stdout, overflow: spool, spool: {fsync: never}}`,
		`{name: s3, type: stdout, overflow: conflate}`))
}
