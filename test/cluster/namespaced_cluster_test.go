//go:build cluster

package nodecluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/testing/nodecluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

func TestClusterANamespaceScopedInstallRunsOnRolesAloneAndCannotReadSecretsElsewhere(t *testing.T) {
	c := nodecluster.Start(t)
	ctx := context.Background()
	const ns, name = "kubewire", "kubewire"
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples/helm/secrets-two-namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, "team-a", "team-b"} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	install(t, c, c.Helm(t, ns), ns, name, merge(values, c.ImageValues()))
	pods := kubewirePods(t, c, ns, name)
	if len(pods) != 1 || !ready(pods[0]) {
		t.Fatalf("want one Ready pod, got %d", len(pods))
	}

	t.Run("the release grants Roles and no ClusterRole", func(t *testing.T) {
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name}
		crs, err := c.Client.RbacV1().ClusterRoles().List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		crbs, err := c.Client.RbacV1().ClusterRoleBindings().List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		if len(crs.Items)+len(crbs.Items) != 0 {
			t.Errorf("the release created %d ClusterRoles and %d ClusterRoleBindings", len(crs.Items), len(crbs.Items))
		}
		for _, n := range []string{"team-a", "team-b"} {
			roles, err := c.Client.RbacV1().Roles(n).List(ctx, sel)
			if err != nil || len(roles.Items) == 0 {
				t.Errorf("no Role of the release in %s (%v)", n, err)
			}
		}
	})

	// The pod's own identity: a token for its ServiceAccount, as the
	// kubelet mounts one.
	sa := pods[0].Spec.ServiceAccountName
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: func() *int64 { s := int64(600); return &s }()},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	asPod := rest.AnonymousClientConfig(c.Config)
	asPod.BearerToken = tr.Status.Token
	podClient := kubernetes.NewForConfigOrDie(asPod)

	t.Run("its ServiceAccount reads Secrets in its namespaces and is denied elsewhere", func(t *testing.T) {
		for _, n := range []string{"team-a", "team-b"} {
			if _, err := podClient.CoreV1().Secrets(n).List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("listing Secrets in %s as %s: %v", n, sa, err)
			}
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default"}, StringData: map[string]string{"k": "v"}}
		if _, err := c.Client.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := podClient.CoreV1().Secrets("default").Get(ctx, "elsewhere", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("getting a Secret in default as %s: %v, want Forbidden", sa, err)
		}
		if _, err := podClient.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Secrets cluster-wide as %s: %v, want Forbidden", sa, err)
		}
	})

	t.Run("a Secret of team-a reaches the pod's log and one of default does not", func(t *testing.T) {
		for _, n := range []string{"team-a", "default"} {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + n, Namespace: n}, StringData: map[string]string{"k": "v"}}
			if _, err := c.Client.CoreV1().Secrets(n).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var log string
		testkit.Within(t, time.Minute, "probe-team-a in the pod's log", func() bool {
			b, err := c.Client.CoreV1().Pods(ns).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).Do(ctx).Raw()
			log = string(b)
			return err == nil && strings.Contains(log, "probe-team-a")
		})
		if strings.Contains(log, "probe-default") {
			t.Error("a Secret of default reached the log")
		}
	})
}
