package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/app"
	"github.com/kubewire/kubewire/internal/config"
	"github.com/kubewire/kubewire/internal/testcluster"
)

// One real etcd + kube-apiserver serves every test of the package; each test
// works in namespaces (and CRD groups) of its own.
var (
	cluster *testcluster.Cluster
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	crds    apiextensionsclient.Interface
	seq     atomic.Int64
)

const limitedUser = "limited"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr, Users: []testcluster.User{{Name: limitedUser}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		return 1
	}
	defer c.Stop()
	cluster = c
	rc := c.RESTConfig(testcluster.AdminUser)
	kube = kubernetes.NewForConfigOrDie(rc)
	dyn = dynamic.NewForConfigOrDie(rc)
	crds = apiextensionsclient.NewForConfigOrDie(rc)
	return m.Run()
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%10000, seq.Add(1))
}

func namespace(t *testing.T) string {
	t.Helper()
	name := unique("ns")
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

// syncBuffer is the stdout sink's writer in tests: it collects whole lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// kubewire is one in-process run of the app with the stdout sink captured.
type kubewire struct {
	app  *app.App
	out  syncBuffer
	logs syncBuffer
	stop context.CancelFunc
	done chan struct{}
	// undelivered is what Run reported.
	undelivered int
}

// start runs kubewire with cfgYAML as user until the test ends.
func start(t *testing.T, cfgYAML, user string) *kubewire {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	k := &kubewire{done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(&k.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := app.New(app.Options{Config: cfg, REST: cluster.RESTConfig(user), Logger: log, Stdout: &k.out})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	k.app = a
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	go func() {
		defer close(k.done)
		k.undelivered, _ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		k.shutdown(t)
		if t.Failed() {
			t.Logf("kubewire logs:\n%s", k.logs.String())
		}
	})
	return k
}

func (k *kubewire) shutdown(t *testing.T) {
	t.Helper()
	k.stop()
	select {
	case <-k.done:
	case <-time.After(60 * time.Second):
		t.Fatal("kubewire did not stop within 60s")
	}
}

// events parses every line the stdout sink wrote.
func (k *kubewire) events(t *testing.T) []event.Event {
	t.Helper()
	var evs []event.Event
	for _, line := range strings.Split(strings.TrimSpace(k.out.String()), "\n") {
		if line == "" {
			continue
		}
		var ev event.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stdout line is not a CloudEvent: %v\n%s", err, line)
		}
		evs = append(evs, ev)
	}
	return evs
}

// waitFor polls the output until cond holds, failing after a deadline.
func (k *kubewire) waitFor(t *testing.T, what string, cond func([]event.Event) bool) []event.Event {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs := k.events(t)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; got %d events:\n%s", what, len(evs), k.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog polls the logs for a line containing every part.
func (k *kubewire) waitLog(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, line := range strings.Split(k.logs.String(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a log line with %q; logs:\n%s", parts, k.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ext(ev event.Event, name string) string {
	v, _ := ev.Extensions()[name].(string)
	return v
}

// completed counts snapshot.completed markers of a resource ("configmaps").
func completed(resource string) func([]event.Event) bool {
	return func(evs []event.Event) bool {
		return countCompleted(evs, resource) > 0
	}
}

func countCompleted(evs []event.Event, resource string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type() == encoding.TypeSnapshotCompleted && ext(ev, encoding.ExtPartitionKey) == resource {
			n++
		}
	}
	return n
}

// byKey groups object events (not markers) by partition key.
func byKey(evs []event.Event) map[string][]event.Event {
	m := map[string][]event.Event{}
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type(), encoding.TypePrefix+"object.") {
			k := ext(ev, encoding.ExtPartitionKey)
			m[k] = append(m[k], ev)
		}
	}
	return m
}

func has(key string, types ...string) func([]event.Event) bool {
	return func(evs []event.Event) bool {
		got := byKey(evs)[key]
		return len(got) >= len(types)
	}
}

// installCRD creates a namespaced CRD "widgets.<group>" and waits until it
// is established.
func installCRD(t *testing.T, group string) schema.GroupVersionResource {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: ptr(true),
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err == nil {
			return gvr
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not served: %v", crd.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

func widget(ns, name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion("placeholder")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func configMap(ns, name string, data map[string]string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: data}
}
