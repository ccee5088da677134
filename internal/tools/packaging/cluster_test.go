package packaging_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/leader"
	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/tools/packaging"
)

// warnings collects the API server's warnings (Pod Security among them).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// applier creates rendered objects through the dynamic client, mapping each
// kind to its resource with the API server's own discovery.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	rc := rest.CopyConfig(testCluster(t).RESTConfig(testcluster.AdminUser))
	w := &warnings{}
	rc.WarningHandlerWithContext = w
	kube := kubernetes.NewForConfigOrDie(rc)
	return &applier{
		dyn:    dynamic.NewForConfigOrDie(rc),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery())),
		warn:   w,
	}
}

// create creates obj, or with dryRun only asks the API server to admit it:
// validation (strict, so an unknown field is an error), defaulting and
// admission all run, and nothing is stored.
func (a *applier) create(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if ns := obj.GetNamespace(); ns != "" {
		ri = a.dyn.Resource(m.Resource).Namespace(ns)
	}
	_, err = ri.Create(ctx, obj, opts)
	return err
}

var (
	monitoringCRDsMu sync.Mutex
	monitoringCRDs   = map[string]bool{}
)

// installMonitoringCRD serves a monitoring.coreos.com/v1 kind
// (ServiceMonitor, PrometheusRule) as the Prometheus Operator would, so
// that the chart's optional objects are admitted like every other object.
// The schema is the one given, or open: what is checked is that the API
// server accepts the object, with the operator's own rules where a schema
// states them.
func installMonitoringCRD(t *testing.T, a *applier, kind string, schema *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	plural := strings.ToLower(kind) + "s"
	monitoringCRDsMu.Lock()
	defer monitoringCRDsMu.Unlock()
	if !monitoringCRDs[kind] {
		if schema == nil {
			preserve := true
			schema = &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
		}
		crds := apiextensionsclient.NewForConfigOrDie(testCluster(t).RESTConfig(testcluster.AdminUser))
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".monitoring.coreos.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "monitoring.coreos.com",
				Names: apiextensionsv1.CustomResourceDefinitionNames{
					Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List",
				},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				}},
			},
		}
		if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s CRD: %v", kind, err)
		}
		monitoringCRDs[kind] = true
	}
	// The CRD is served a moment after it is created; discovery must then be
	// read again.
	testkit.Eventually(t, kind+"s to be served", func() bool {
		a.mapper.Reset()
		_, err := a.mapper.RESTMapping(runtimeschema.GroupKind{Group: "monitoring.coreos.com", Kind: kind}, "v1")
		return err == nil
	})
}

func installServiceMonitorCRD(t *testing.T, a *applier) {
	t.Helper()
	installMonitoringCRD(t, a, "ServiceMonitor", nil)
}

// installPrometheusRuleCRD serves PrometheusRules with the part of the
// Prometheus Operator's schema the chart's rule uses: groups with a name,
// rules with an expr, a duration in for, and string labels and
// annotations. Unknown fields are refused, as a strict create does.
func installPrometheusRuleCRD(t *testing.T, a *applier) {
	t.Helper()
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strMap := apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}}
	intOrString := true
	rule := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"expr"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"alert":  str,
			"record": str,
			"expr":   {XIntOrString: intOrString, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
			"for": {Type: "string",
				Pattern: `^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`},
			"labels":      strMap,
			"annotations": strMap,
		},
	}
	group := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"name"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"name":     {Type: "string", MinLength: ptr(int64(1))},
			"interval": str,
			"rules":    {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &rule}},
		},
	}
	installMonitoringCRD(t, a, "PrometheusRule", &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"groups": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &group}},
			}},
		},
	})
}

func TestTheRenderedObjectsAreAdmittedByARealAPIServer(t *testing.T) {
	a := newApplier(t)
	installServiceMonitorCRD(t, a)
	installPrometheusRuleCRD(t, a)
	ctx := context.Background()
	nsA, nsB := unique("team-a"), unique("team-b")
	createNamespace(t, nsA)
	createNamespace(t, nsB)
	for _, vs := range valuesSets(nsA, nsB) {
		t.Run(vs.name, func(t *testing.T) {
			rel := unique("rel")
			createNamespace(t, rel)
			r := render(t, "kw", rel, vs.values)
			a.warn.take()
			for _, m := range append(slices.Clone(r.Manifests), r.Hooks...) {
				o := m.Object
				if err := a.create(ctx, o, true); err != nil {
					t.Errorf("%s %s/%s (from %s) is refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), m.Source, err)
				}
			}
			// The namespaces warn on anything the restricted Pod Security
			// Standard forbids, so a silent admission proves the pod meets it.
			if w := a.warn.take(); len(w) > 0 {
				t.Errorf("the API server warned: %q", w)
			}
		})
	}
}

// serviceAccountClient applies the chart's ServiceAccount and RBAC for real,
// then returns a client configuration that authenticates as that
// ServiceAccount with a token from the TokenRequest API, exactly as the pod
// would.
func serviceAccountClient(t *testing.T, r *packaging.Rendered) *rest.Config {
	t.Helper()
	ctx := context.Background()
	sa := applyRBAC(t, r)
	admin := testCluster(t).RESTConfig(testcluster.AdminUser)
	tr, err := kubernetes.NewForConfigOrDie(admin).CoreV1().ServiceAccounts(sa.GetNamespace()).CreateToken(ctx, sa.GetName(),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", sa.GetNamespace(), sa.GetName(), err)
	}
	return &rest.Config{
		Host:            admin.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.TLSClientConfig.CAData},
		QPS:             50,
		Burst:           100,
	}
}

// applyRBAC creates the chart's ServiceAccount and RBAC objects for real
// and returns the ServiceAccount.
func applyRBAC(t *testing.T, r *packaging.Rendered) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	a := newApplier(t)
	var sa *unstructured.Unstructured
	for _, m := range r.Manifests {
		o := m.Object
		if o.GetKind() == "ServiceAccount" {
			sa = o
		}
		if o.GetKind() == "ServiceAccount" || slices.Contains(rbacKinds, o.GetKind()) {
			if err := a.create(ctx, o, false); err != nil {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	if sa == nil {
		t.Fatal("the chart rendered no ServiceAccount")
	}
	return sa
}

// allowed asks the API server, as admin, whether the ServiceAccount sa may
// do verb on group/resource in namespace ns ("" for all namespaces), with
// a SubjectAccessReview for the user and groups its token authenticates as.
func allowed(t *testing.T, sa *unstructured.Unstructured, verb, group, resource, ns string) bool {
	t.Helper()
	return allowedNamed(t, sa, verb, group, resource, ns, "")
}

// allowedNamed is allowed for the object called name ("" for any).
func allowedNamed(t *testing.T, sa *unstructured.Unstructured, verb, group, resource, ns, name string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName(),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.GetNamespace(), "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: resource, Name: name,
		},
	}}
	got, err := adminClient(t).AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s %s %q in %q: %v", verb, resource, name, ns, err)
	}
	return got.Status.Allowed
}

func TestResourcesWatchedPerNamespaceAreReadableThereAndNowhereElse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resource string
		// field is the resource entry's watchPerNamespace, as YAML, or "".
		field string
		// clusterWide: the chart must fall back to a ClusterRole, so the
		// resource is readable in every namespace.
		clusterWide bool
	}{
		{name: "secrets in two namespaces are granted by a Role in each by default", resource: "secrets"},
		{name: "configmaps in two namespaces with watchPerNamespace are granted by a Role in each", resource: "configmaps", field: "true"},
		{name: "secrets in two namespaces with watchPerNamespace false are granted cluster-wide", resource: "secrets", field: "false", clusterWide: true},
		{name: "configmaps in two namespaces are granted cluster-wide by default", resource: "configmaps", clusterWide: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, a, b, other := unique("rel"), unique("watched-a"), unique("watched-b"), unique("other")
			for _, ns := range []string{rel, a, b, other} {
				createNamespace(t, ns)
			}
			field := ""
			if tc.field != "" {
				field = ", watchPerNamespace: " + tc.field
			}
			r := render(t, "kw", rel, fmt.Sprintf(`
config:
  cluster: test
  resources: [{version: v1, resource: %s, namespaces: [%s, %s], sinks: [out]%s}]
  sinks: [{name: out, type: stdout}]
`, tc.resource, a, b, field))
			if crs := r.Objects("ClusterRole"); (len(crs) > 0) != tc.clusterWide {
				t.Errorf("rendered %d ClusterRoles; want one exactly when the grant is cluster-wide (%v)", len(crs), tc.clusterWide)
			}
			sa := applyRBAC(t, r)

			// RBAC is read from the API server's cache, so a fresh grant is
			// waited for; once every grant is seen, a denial is final.
			for _, ns := range []string{a, b} {
				for _, verb := range []string{"get", "list", "watch"} {
					testkit.Eventually(t, fmt.Sprintf("%s %s in %s to be allowed", verb, tc.resource, ns), func() bool {
						return allowed(t, sa, verb, "", tc.resource, ns)
					})
				}
			}
			for _, c := range []struct{ what, ns string }{
				{"in a namespace not watched", other},
				{"in the release namespace", rel},
				{"in all namespaces at once", ""},
			} {
				for _, verb := range []string{"get", "list", "watch"} {
					if got := allowed(t, sa, verb, "", tc.resource, c.ns); got != tc.clusterWide {
						t.Errorf("%s %s %s: allowed %v, want %v", verb, tc.resource, c.what, got, tc.clusterWide)
					}
				}
			}
			for _, verb := range []string{"create", "update", "delete"} {
				if allowed(t, sa, verb, "", tc.resource, a) {
					t.Errorf("%s %s in a watched namespace is allowed; kubewire only reads", verb, tc.resource)
				}
			}
		})
	}
}

func TestKubewireStreamsWithTheChartsRBACAndCannotReadAnythingElse(t *testing.T) {
	for _, tc := range []struct {
		name string
		// watched is how many namespaces the config lists.
		watched int
		// otherNamespaceReadable: several namespaces need a cluster-wide
		// grant (docs/configuration.md), which cannot be narrowed to them.
		otherNamespaceReadable bool
	}{
		{name: "configmaps in one namespace, granted by a Role there", watched: 1},
		{name: "configmaps in two namespaces, granted cluster-wide because kubewire lists them in one call", watched: 2, otherNamespaceReadable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			admin := adminClient(t)
			rel, other := unique("rel"), unique("other")
			var watched []string
			for range tc.watched {
				watched = append(watched, unique("watched"))
			}
			for _, ns := range append([]string{rel, other}, watched...) {
				createNamespace(t, ns)
			}
			r := render(t, "kw", rel, fmt.Sprintf(`
config:
  cluster: test
  resources:
    - version: v1
      resource: configmaps
      namespaces: [%s]
      sinks: [out]
  sinks:
    - name: out
      type: stdout
`, strings.Join(watched, ", ")))
			rc := serviceAccountClient(t, r)

			createConfigMap := func(ns, name string) {
				t.Helper()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
				if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatalf("create configmap %s/%s: %v", ns, name, err)
				}
			}
			for _, ns := range watched {
				createConfigMap(ns, "before")
			}
			createConfigMap(other, "unwatched")

			// Exactly the config the chart ships, as the chart's identity.
			k := apptest.Start(t, configText(t, r), rc)
			evs := k.WaitFor(t, "the configmaps snapshot", func(evs []event.Event) bool {
				return apptest.CountCompleted(evs, "configmaps") > 0
			})
			for _, ns := range watched {
				if key := "configmaps/" + ns + "/before"; len(apptest.ByKey(evs)[key]) == 0 {
					t.Errorf("the snapshot has no %s", key)
				}
			}
			for _, ns := range watched {
				createConfigMap(ns, "after")
				key := "configmaps/" + ns + "/after"
				k.WaitFor(t, key+" to stream", func(evs []event.Event) bool {
					return slices.ContainsFunc(apptest.ByKey(evs)[key], func(ev event.Event) bool {
						return strings.HasSuffix(ev.Type(), "object.added")
					})
				})
			}
			for key := range apptest.ByKey(k.Events(t)) {
				if strings.Contains(key, "/"+other+"/") {
					t.Errorf("an unwatched namespace's object streamed: %s", key)
				}
			}
			if logs := k.Logs.String(); strings.Contains(logs, "permission denied") || strings.Contains(logs, "forbidden") {
				t.Errorf("kubewire met a permission error with the chart's RBAC:\n%s", logs)
			}

			// With the same token, everything else is refused.
			kube := kubernetes.NewForConfigOrDie(rc)
			forbidden := func(what string, err error) {
				t.Helper()
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: want Forbidden, got %v", what, err)
				}
			}
			list := metav1.ListOptions{}
			_, err := kube.CoreV1().Secrets(watched[0]).List(ctx, list)
			forbidden("list secrets in the watched namespace", err)
			_, err = kube.CoreV1().Pods(watched[0]).List(ctx, list)
			forbidden("list pods in the watched namespace", err)
			_, err = kube.CoreV1().Secrets(rel).List(ctx, list)
			forbidden("list secrets in the release namespace", err)
			_, err = kube.CoreV1().Pods("").List(ctx, list)
			forbidden("list pods in all namespaces", err)
			_, err = kube.CoreV1().Nodes().List(ctx, list)
			forbidden("list nodes", err)
			_, err = kube.CoordinationV1().Leases(rel).List(ctx, list)
			forbidden("list leases without leader election", err)
			_, err = kube.CoreV1().ConfigMaps(watched[0]).Create(ctx,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written"}}, metav1.CreateOptions{})
			forbidden("create a configmap in the watched namespace", err)
			err = kube.CoreV1().ConfigMaps(watched[0]).Delete(ctx, "before", metav1.DeleteOptions{})
			forbidden("delete a watched configmap", err)
			_, err = kube.CoreV1().ConfigMaps(other).List(ctx, list)
			if tc.otherNamespaceReadable {
				if err != nil {
					t.Errorf("list configmaps in another namespace with a cluster-wide grant: %v", err)
				}
			} else {
				forbidden("list configmaps in an unwatched namespace", err)
				_, err = kube.CoreV1().ConfigMaps("").List(ctx, list)
				forbidden("list configmaps in all namespaces", err)
			}
		})
	}
}

func TestTheLeaseRoleLetsKubewireLeadAndReleaseItsOwnLeaseOnly(t *testing.T) {
	ctx := context.Background()
	rel, watched := unique("rel"), unique("watched")
	createNamespace(t, rel)
	createNamespace(t, watched)
	r := render(t, "kw", rel, fmt.Sprintf(`
replicaCount: 2
config:
  cluster: test
  resources: [{version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}]
  sinks: [{name: out, type: stdout}]
`, watched))
	rc := serviceAccountClient(t, r)
	const leaseName = "kw-kubewire"

	// kubewire's own election code, as the chart's ServiceAccount: it must
	// create the Lease, renew it and release it on shutdown.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- leader.Run(runCtx, rc, leader.Config{
			LeaseName: leaseName, Namespace: rel, Identity: "replica-1",
			LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		}, discardLogger(), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
		})
	}()
	select {
	case <-leading:
	case err := <-done:
		t.Fatalf("leader election ended before leading: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("did not become leader within a minute")
	}
	admin := adminClient(t)
	lease := func() (holder string, renewed time.Time) {
		l, err := admin.CoordinationV1().Leases(rel).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get lease: %v", err)
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil {
			renewed = l.Spec.RenewTime.Time
		}
		return holder, renewed
	}
	h, first := lease()
	if h != "replica-1" {
		t.Fatalf("lease holder %q, want replica-1", h)
	}
	// A renewal is an update of the Lease: seeing renewTime move while the
	// holder stays proves the Role allows it.
	testkit.Eventually(t, "the leader to renew its lease", func() bool {
		h, renewed := lease()
		if h != "replica-1" {
			t.Fatalf("lease holder became %q while replica-1 was leading (renewal refused?)", h)
		}
		return renewed.After(first)
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("leader.Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("leader.Run did not return within a minute of cancellation")
	}
	if h, _ := lease(); h != "" {
		t.Errorf("lease still held by %q after shutdown; it must be released so a standby takes over at once", h)
	}

	kube := kubernetes.NewForConfigOrDie(rc)
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want Forbidden, got %v", what, err)
		}
	}
	_, err := kube.CoordinationV1().Leases(rel).Get(ctx, "another-controller", metav1.GetOptions{})
	forbidden("get another lease", err)
	_, err = kube.CoordinationV1().Leases(rel).List(ctx, metav1.ListOptions{})
	forbidden("list leases", err)
	err = kube.CoordinationV1().Leases(rel).Delete(ctx, leaseName, metav1.DeleteOptions{})
	forbidden("delete its own lease", err)
	_, err = kube.CoordinationV1().Leases(watched).Get(ctx, leaseName, metav1.GetOptions{})
	forbidden("get a lease of that name in another namespace", err)
}

func TestTheCheckpointRoleLetsKubewireKeepItsOwnLeaseOnly(t *testing.T) {
	ctx := context.Background()
	rel, watched := unique("rel"), unique("watched")
	createNamespace(t, rel)
	createNamespace(t, watched)
	r := render(t, "kw", rel, fmt.Sprintf(`
config:
  cluster: test
  resources: [{version: v1, resource: configmaps, namespaces: [%s], sinks: [out]}]
  sinks: [{name: out, type: stdout}]
`, watched))
	const name = "kw-kubewire-checkpoint"
	d := deployment(t, r)
	if args, _, _ := unstructured.NestedStringSlice(container(t, d), "args"); !slices.Contains(args, "--checkpoint="+rel+"/"+name) {
		t.Fatalf("the Deployment does not pass --checkpoint=%s/%s: %v", rel, name, args)
	}
	rc := serviceAccountClient(t, r)
	sa := renderedServiceAccount(t, r)
	const group = "coordination.k8s.io"

	// What kubewire does with its checkpoint, each verb asked of the API
	// server for the chart's ServiceAccount. RBAC is read from a cache, so
	// a fresh grant is waited for; once seen, a denial is final.
	testkit.Eventually(t, "create leases in the release namespace to be allowed", func() bool {
		return allowed(t, sa, "create", group, "leases", rel)
	})
	for _, verb := range []string{"get", "update"} {
		testkit.Eventually(t, verb+" of the checkpoint to be allowed", func() bool {
			return allowedNamed(t, sa, verb, group, "leases", rel, name)
		})
	}
	for _, c := range []struct{ what, verb, ns, name string }{
		{"get another Lease in the release namespace", "get", rel, "kw-kubewire"},
		{"update another Lease in the release namespace", "update", rel, "kw-kubewire"},
		{"patch its own checkpoint", "patch", rel, name},
		{"delete its own checkpoint", "delete", rel, name},
		{"list leases in the release namespace", "list", rel, ""},
		{"watch leases in the release namespace", "watch", rel, ""},
		{"create leases in another namespace", "create", watched, ""},
		{"update a Lease of the checkpoint's name in another namespace", "update", watched, name},
	} {
		if allowedNamed(t, sa, c.verb, group, "leases", c.ns, c.name) {
			t.Errorf("%s is allowed; the chart grants only create, and get and update of %s in %s", c.what, name, rel)
		}
	}

	// kubewire's own checkpoint store, as the ServiceAccount: it creates the
	// Lease, reads it back and updates it conditionally.
	store, err := checkpoint.New(rc, rel, name, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]checkpoint.Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "100"}}}
	if err := store.Save(ctx, first); err != nil {
		t.Fatalf("the first save, which creates the checkpoint Lease: %v", err)
	}
	if err := store.Save(ctx, map[string]checkpoint.Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "200"}}}); err != nil {
		t.Fatalf("a later save, a conditional update: %v", err)
	}
	got, err := checkpoint.New(rc, rel, name, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := got.Load(ctx); err != nil || entries["configmaps"].Streams[""] != "200" {
		t.Fatalf("load the checkpoint back: %v, %v", entries, err)
	}
	// A writer that read before the last save is refused as a conflict,
	// which reached storage, rather than as forbidden.
	stale, err := kubernetes.NewForConfigOrDie(rc).CoordinationV1().Leases(rel).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Save(ctx, map[string]checkpoint.Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "300"}}}); err != nil {
		t.Fatalf("a third save: %v", err)
	}
	_, err = kubernetes.NewForConfigOrDie(rc).CoordinationV1().Leases(rel).Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("update the checkpoint from a stale resourceVersion: want Conflict, got %v", err)
	}

	// Another Lease in the same namespace (the leader election's, say) is
	// out of reach.
	admin := adminClient(t)
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kw-kubewire", Namespace: rel}}
	if _, err := admin.CoordinationV1().Leases(rel).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create another lease: %v", err)
	}
	leases := kubernetes.NewForConfigOrDie(rc).CoordinationV1().Leases(rel)
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want Forbidden, got %v", what, err)
		}
	}
	_, err = leases.Get(ctx, "kw-kubewire", metav1.GetOptions{})
	forbidden("get another lease", err)
	_, err = leases.Update(ctx, other, metav1.UpdateOptions{})
	forbidden("update another lease", err)
	_, err = leases.List(ctx, metav1.ListOptions{})
	forbidden("list leases in the release namespace", err)
	err = leases.Delete(ctx, name, metav1.DeleteOptions{})
	forbidden("delete its own checkpoint", err)
	_, err = kubernetes.NewForConfigOrDie(rc).CoreV1().ConfigMaps(rel).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	forbidden("create a configmap in the release namespace", err)
}

// renderedServiceAccount returns the chart's ServiceAccount, as rendered.
func renderedServiceAccount(t *testing.T, r *packaging.Rendered) *unstructured.Unstructured {
	t.Helper()
	sas := r.Objects("ServiceAccount")
	if len(sas) != 1 {
		t.Fatalf("want one ServiceAccount, got %d", len(sas))
	}
	return sas[0]
}
