//go:build cluster

package nodecluster_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/testing/nodecluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// hostPathVolume creates a PersistentVolume without a StorageClass on a
// directory of the node, owned by kubewire's user: the kubelet applies no
// fsGroup to a hostPath volume.
func hostPathVolume(t *testing.T, c *nodecluster.Cluster, name string) (dir string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("4Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// spooled is the number of bytes in the files under dir.
func spooled(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func TestClusterHelmUpgradeDuringABrokerOutageLosesNoVersionOutsideADeclaredGap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim bool
	}{
		{"with the spool on a claim bound to a hostPath PersistentVolume", true},
		{"with the spool on the default emptyDir", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodecluster.Start(t)
			b := startHostBrokers(t)
			ctx := context.Background()
			const ns, name = "kubewire", "kubewire"
			kafkaSecret(t, c, ns, b)
			values := merge(exampleWithHostBrokers(t, b), c.ImageValues())
			// A small in-memory buffer, so that what the outage holds back
			// goes to the spool.
			values["config"].(map[string]any)["dispatch"] = map[string]any{"bufferEvents": 16}
			var spoolDir string
			if tc.claim {
				spoolDir = hostPathVolume(t, c, "kubewire-spool")
				values["spool"] = map[string]any{"persistence": map[string]any{"enabled": true, "storageClass": "-"}}
			}
			cfg := c.Helm(t, ns)
			install(t, c, cfg, ns, name, values)
			if tc.claim {
				pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
				if err != nil || len(pvc.Items) != 1 || pvc.Items[0].Spec.VolumeName != "kubewire-spool" {
					t.Fatalf("want the chart's claim bound to the hostPath volume: %v %v", pvc, err)
				}
			}
			w := startCounter(t, c, "default", "counter", 50*time.Millisecond)
			s := counterView(t, b, "default", "counter")
			testkit.Within(t, time.Minute, "the counter's first values in Kafka", func() bool { return w.written() > 5 && s.has(5) })
			before := map[string]bool{}
			for _, p := range kubewirePods(t, c, ns, name) {
				before[p.Name] = true
			}

			b.kafka.Stop(t)
			outage, atStop := time.Now(), w.written()
			// The upgrade cannot wait for Ready: /readyz stays 503 while
			// the broker is down.
			up := action.NewUpgrade(cfg)
			up.Namespace = ns
			values["config"].(map[string]any)["dispatch"] = map[string]any{"bufferEvents": 16, "batchSize": 50}
			if _, err := up.Run(name, nodecluster.ChartPackage(t), values); err != nil {
				t.Fatalf("helm upgrade: %v", err)
			}
			upgraded := time.Now()
			// The outage lasts until the new pod runs and 200 versions (10 s
			// of writes) were made without a broker.
			testkit.Within(t, 3*time.Minute, "a new pod running the new config, and 200 versions written in the outage", func() bool {
				if w.written()-atStop < 200 {
					return false
				}
				for _, p := range kubewirePods(t, c, ns, name) {
					if !before[p.Name] && p.Status.Phase == corev1.PodRunning {
						return true
					}
				}
				return false
			})
			duringOutage := w.written() - atStop
			if tc.claim {
				// The old pod is gone (Recreate); what it could not publish
				// is on the claim, for the new one.
				n := spooled(spoolDir)
				t.Logf("the claim's spool holds %d bytes as the broker comes back", n)
				if n == 0 {
					t.Error("nothing was spooled on the claim during the outage")
				}
			}
			b.kafka.Start(t)
			t.Logf("broker down for %s; the upgrade ran %s into it", time.Since(outage).Round(100*time.Millisecond), upgraded.Sub(outage).Round(100*time.Millisecond))
			testkit.Within(t, 3*time.Minute, "only new pods, Ready", func() bool {
				pods := kubewirePods(t, c, ns, name)
				for _, p := range pods {
					if before[p.Name] || !ready(p) {
						return false
					}
				}
				return len(pods) == 1
			})
			rollout := time.Since(upgraded)
			after := w.written() + 1
			testkit.Within(t, 2*time.Minute, "a value written after the rollout in Kafka", func() bool { return s.has(after) })
			w.halt()
			last := w.written()
			testkit.Within(t, 2*time.Minute, "the last value in Kafka", func() bool { return s.has(last) })
			total, declared, first := missing(w, s)
			t.Logf("rollout %s (from the upgrade until the new pod was Ready, the broker back meanwhile); the counter wrote %d versions, %d of them while the broker was down; the consumer missed %d, %d inside a declared gap (first missing: %v); gaps: %d",
				rollout.Round(100*time.Millisecond), last, duringOutage, total, declared, first, len(s.gaps))
			if total != declared {
				t.Errorf("%d versions missing outside a declared gap: %v", total-declared, first)
			}
		})
	}
}
