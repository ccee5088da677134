package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

const validateHeader = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
sinks:
  - name: out
    type: stdout
resources:
`

// readConfigMapsIn creates namespaces granted and denied and lets the
// limited user list and watch configmaps in granted only.
func readConfigMapsIn(t *testing.T, c *testcluster.Cluster, granted, denied string) {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig(testcluster.AdminUser))
	for _, ns := range []string{granted, denied} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: granted, Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}},
	}
	if _, err := kube.RbacV1().Roles(granted).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: granted, Name: "read-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: limitedUser}},
	}
	if _, err := kube.RbacV1().RoleBindings(granted).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestValidateWithAKubeconfigChecksResourcesPermissionsAndFilesAgainstTheCluster(t *testing.T) {
	c := testCluster(t)
	dir := t.TempDir()
	admin, limited := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "limited.kubeconfig")
	if err := c.WriteKubeconfig(admin, testcluster.AdminUser); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteKubeconfig(limited, limitedUser); err != nil {
		t.Fatal(err)
	}
	granted, denied := fmt.Sprintf("granted-%d", os.Getpid()), fmt.Sprintf("denied-%d", os.Getpid())
	readConfigMapsIn(t, c, granted, denied)
	present := filepath.Join(dir, "present.pem")
	if err := os.WriteFile(present, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name       string
		resources  string
		extra      string // appended to the config (more sinks)
		kubeconfig string
		strict     bool
		code       int
		stdout     []string // each must appear on stdout
		stderr     []string // each must appear on stderr
		absent     []string // none may appear on stdout or stderr
	}{
		{name: "served resources the user may read pass",
			resources:  "  - {version: v1, resource: configmaps, sinks: [out]}\n  - {group: apps, version: v1, resource: deployments, sinks: [out]}\n",
			kubeconfig: admin, code: cli.ExitOK,
			stdout: []string{"valid (2 resources, 1 sinks); checked against https://127.0.0.1:", `(context "testcluster")`}},
		{name: "a resource the cluster does not serve is an error naming it",
			resources:  "  - {version: v1, resource: configmaps, sinks: [out]}\n  - {group: example.com, version: v1, resource: widgets, sinks: [out]}\n",
			kubeconfig: admin, code: cli.ExitConfig,
			stderr: []string{"resources[1]: widgets.example.com/v1 is not served", "optional: true", "1 check(s) failed"},
			absent: []string{"resources[0]"}},
		{name: "an optional resource the cluster does not serve is a warning",
			resources:  "  - {group: example.com, version: v1, resource: widgets, optional: true, sinks: [out]}\n",
			kubeconfig: admin, code: cli.ExitOK,
			stdout: []string{"warning: resources[0]: widgets.example.com/v1 is not served", "valid"}},
		{name: "with --strict an optional resource the cluster does not serve fails",
			resources:  "  - {group: example.com, version: v1, resource: widgets, optional: true, sinks: [out]}\n",
			kubeconfig: admin, strict: true, code: cli.ExitConfig,
			stdout: []string{"warning: resources[0]: widgets.example.com/v1 is not served"}, stderr: []string{"--strict: 1 warning"}},
		{name: "namespaces on a cluster-scoped resource is a warning",
			resources:  "  - {version: v1, resource: nodes, namespaces: [a], sinks: [out]}\n",
			kubeconfig: admin, code: cli.ExitOK,
			stdout: []string{"warning: resources[0].namespaces: nodes/v1 is cluster-scoped"}},
		{name: "a resource served without list and watch is an error",
			resources:  "  - {group: authentication.k8s.io, version: v1, resource: tokenreviews, sinks: [out]}\n",
			kubeconfig: admin, code: cli.ExitConfig,
			stderr: []string{"resources[0]: tokenreviews.authentication.k8s.io/v1 is served without list and watch"}},
		{name: "with a watch per namespace, a namespace where the user may not read is named, and the one where it may is not",
			resources:  fmt.Sprintf("  - {version: v1, resource: configmaps, namespaces: [%s, %s], watchPerNamespace: true, sinks: [out]}\n", granted, denied),
			kubeconfig: limited, code: cli.ExitConfig,
			stderr: []string{fmt.Sprintf(`resources[0]: configmaps/v1: permission denied: the kubeconfig's user cannot list or watch it in namespace %q`, denied)},
			absent: []string{fmt.Sprintf("namespace %q", granted)}},
		{name: "several namespaces read through one cluster-wide watch need cluster-wide permission",
			resources:  fmt.Sprintf("  - {version: v1, resource: configmaps, namespaces: [%s, %s], sinks: [out]}\n", granted, denied),
			kubeconfig: limited, code: cli.ExitConfig,
			stderr: []string{"resources[0]: configmaps/v1: permission denied", "in all namespaces"}},
		{name: "a user who may read in one namespace only is denied cluster-wide",
			resources:  "  - {version: v1, resource: configmaps, sinks: [out]}\n",
			kubeconfig: limited, code: cli.ExitConfig,
			stderr: []string{"resources[0]: configmaps/v1: permission denied", "in all namespaces"}},
		{name: "discovered resources the user may not read are listed as warnings, and the rest passes",
			resources:  fmt.Sprintf("  - {discover: {groups: [\"\"], resources: [configmaps, pods, secrets]}, namespaces: [%s], sinks: [out]}\n", granted),
			kubeconfig: limited, code: cli.ExitOK,
			stdout: []string{fmt.Sprintf(`warning: resources[0]: pods/v1 (discovered): permission denied: the kubeconfig's user cannot list or watch it in namespace %q`, granted), "valid"},
			absent: []string{"configmaps/v1 (discovered)", "secrets"}},
		{name: "the namespace the user may read passes",
			resources:  fmt.Sprintf("  - {version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}\n", granted),
			kubeconfig: limited, code: cli.ExitOK, stdout: []string{"valid"}},
		{name: "files the sinks name that are missing or directories are errors naming their fields",
			resources: "  - {version: v1, resource: configmaps, sinks: [out]}\n",
			extra: fmt.Sprintf(`  - name: kafka
    type: kafka
    kafka:
      brokers: ["kafka:9093"]
      tls: {caFile: %s}
      sasl: {mechanism: PLAIN, username: u, passwordFile: %s}
  - name: nats
    type: nats
    nats:
      servers: ["tls://nats:4222"]
      tls: {caFile: %s}
      auth: {credsFile: /nonexistent/user.creds}
`, present, dir, present),
			kubeconfig: admin, code: cli.ExitConfig,
			stderr: []string{"sinks[1].kafka.sasl.passwordFile: " + dir + " is a directory",
				"sinks[2].nats.auth.credsFile: open /nonexistent/user.creds: no such file", "2 check(s) failed"},
			absent: []string{"caFile"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(validateHeader, "resources:\n", tc.extra+"resources:\n", 1) + tc.resources
			args := []string{"validate", "--config", write(t, cfg), "--kubeconfig", tc.kubeconfig}
			if tc.strict {
				args = append(args, "--strict")
			}
			code, out, errOut := run(args...)
			t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, m := range tc.stdout {
				if !strings.Contains(out, m) {
					t.Errorf("stdout does not mention %q:\n%s", m, out)
				}
			}
			for _, m := range tc.stderr {
				if !strings.Contains(errOut, m) {
					t.Errorf("stderr does not mention %q:\n%s", m, errOut)
				}
			}
			for _, m := range tc.absent {
				if strings.Contains(out+errOut, m) {
					t.Errorf("output mentions %q:\n%s%s", m, out, errOut)
				}
			}
		})
	}
}

func TestValidateWithoutAKubeconfigStaysOfflineAndStrictFailsOnWarnings(t *testing.T) {
	// A Secret resource with allowSecretData is valid and warned about; the
	// NATS credentials file does not exist, which only the online checks see.
	cfg := write(t, validateHeader+"  - {version: v1, resource: secrets, namespaces: [a], allowSecretData: true, sinks: [out]}\n")
	missingFile := write(t, strings.Replace(validateHeader, "resources:\n",
		"  - name: nats\n    type: nats\n    nats: {servers: [\"tls://nats:4222\"], auth: {credsFile: /nonexistent/user.creds}}\nresources:\n", 1)+
		"  - {version: v1, resource: configmaps, sinks: [out]}\n")
	unreachable := write(t, kubeconfig)
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"a warning alone exits 0", []string{"validate", "--config", cfg}, cli.ExitOK,
			[]string{"warning: resources[0].allowSecretData", "valid"}, nil},
		{"a warning with --strict exits 2 and is printed the same way", []string{"validate", "--config", cfg, "--strict"}, cli.ExitConfig,
			[]string{"warning: resources[0].allowSecretData"}, []string{"--strict: 1 warning(s)"}},
		{"--strict without warnings exits 0", []string{"validate", "--config", write(t, good), "--strict"}, cli.ExitOK,
			[]string{"valid (1 resources, 1 sinks)\n"}, nil},
		{"a missing file is not checked offline", []string{"validate", "--config", missingFile}, cli.ExitOK,
			[]string{"valid (1 resources, 2 sinks)\n"}, nil},
		{"--context without --kubeconfig is a usage error", []string{"validate", "--config", cfg, "--context", "prod"}, cli.ExitConfig,
			nil, []string{"--context needs --kubeconfig"}},
		{"a missing --kubeconfig file is named", []string{"validate", "--config", cfg, "--kubeconfig", "/nonexistent/kc"}, cli.ExitConfig,
			nil, []string{"--kubeconfig /nonexistent/kc"}},
		{"an unknown --context is named", []string{"validate", "--config", cfg, "--kubeconfig", unreachable, "--context", "nosuch"}, cli.ExitConfig,
			nil, []string{`context "nosuch"`}},
		{"a cluster that cannot be reached exits 1 naming it", []string{"validate", "--config", cfg, "--kubeconfig", unreachable}, cli.ExitFailed,
			nil, []string{"https://127.0.0.1:1", `context "c"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// validate must not read $KUBECONFIG: this one would fail.
			t.Setenv("KUBECONFIG", "/nonexistent/from-env")
			code, out, errOut := run(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, m := range tc.stdout {
				if !strings.Contains(out, m) {
					t.Errorf("stdout does not mention %q:\n%s", m, out)
				}
			}
			for _, m := range tc.stderr {
				if !strings.Contains(errOut, m) {
					t.Errorf("stderr does not mention %q:\n%s", m, errOut)
				}
			}
		})
	}
}
