// Command demo starts a throwaway kube-apiserver and etcd, fills them with a
// namespace, a CRD and a few objects, and runs `kubewire run` on the embedded
// example config, and prints each change as `kubewire tail` does: time, type,
// object, resourceVersion, who changed it and, for an update, the fields it
// changed. -raw prints the CloudEvents instead. It keeps changing objects
// every second until Ctrl-C, then stops everything it started and exits 0.
//
// Run it with `make demo` (or `make demo RAW=1`).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

const ns = "demo"

var widgets = schema.GroupVersionResource{Group: "demo.kubewire.io", Version: "v1", Resource: "widgets"}

func main() {
	raw := flag.Bool("raw", false, "print the CloudEvents as kubewire's stdout sink writes them, one JSON object per line")
	flag.Parse()
	// Ctrl-C is for the demo alone: under make, make would otherwise take
	// it too and end with an error, whatever the demo did.
	restore := foreground()
	err := run(*raw)
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	say("stopped kubewire, kube-apiserver and etcd; bye")
}

func run(raw bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	say("starting a local kube-apiserver and etcd (the first run builds them once, about 5 minutes on 2 cores)")
	c, err := testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr})
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while starting
		}
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping cluster:", err)
		}
	}()

	dir, err := os.MkdirTemp("", "kubewire-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfgPath := filepath.Join(dir, "kubewire.yaml")
	if err := c.WriteKubeconfig(kubeconfig, testcluster.AdminUser); err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, append(slices.Clip(config.ExampleYAML), "\ndispatch:\n  spoolDir: "+filepath.Join(dir, "spool")+"\n"...), 0o600); err != nil {
		return err
	}

	rc := c.RESTConfig(testcluster.AdminUser)
	kube := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	if err := seed(ctx, kube, apiextensionsclient.NewForConfigOrDie(rc), dyn); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	say("cluster ready; kubeconfig at " + kubeconfig)
	say("running: kubewire run --config " + cfgPath)
	say("waiting for kubewire's first events: a snapshot of every object, then a change about every second (Ctrl-C to stop)")

	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		churn(ctx, kube, dyn)
	}()
	// kubewire installs its own signal handling: the same Ctrl-C that ends
	// ctx makes it drain and return.
	var out io.Writer = os.Stdout
	printed := make(chan error, 1)
	pr, pw := io.Pipe()
	if raw {
		printed <- nil
	} else {
		out = pw
		go func() {
			err := cli.PrintChanges(pr, os.Stdout)
			pr.CloseWithError(err)
			printed <- err
		}()
	}
	code := cli.Main([]string{"run", "--config", cfgPath, "--kubeconfig", kubeconfig, "--log-level", "warn", "--http-address", "127.0.0.1:0"}, out, os.Stderr)
	pw.Close()
	stop()
	<-churnDone
	if err := <-printed; err != nil {
		return fmt.Errorf("printing the events: %w", err)
	}
	if code != cli.ExitOK {
		return fmt.Errorf("kubewire exited with code %d", code)
	}
	return nil
}

func say(msg string) { fmt.Fprintln(os.Stderr, "demo:", msg) }

func seed(ctx context.Context, kube kubernetes.Interface, crds apiextensionsclient.Interface, dyn dynamic.Interface) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.demo.kubewire.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr(true),
				}},
			}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create CRD: %w", err)
	}
	// The CRD is served a moment after it is created.
	say("waiting for the API server to serve the Widget CRD")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := dyn.Resource(widgets).Namespace(ns).List(ctx, metav1.ListOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("CRD not served after 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for i := range 3 {
		if err := createConfigMap(ctx, kube, fmt.Sprintf("settings-%d", i)); err != nil {
			return err
		}
		if err := createWidget(ctx, dyn, fmt.Sprintf("widget-%d", i)); err != nil {
			return err
		}
	}
	return nil
}

func createConfigMap(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "demo"}},
		Data:       map[string]string{"level": "1"},
	}, metav1.CreateOptions{})
	return err
}

func createWidget(ctx context.Context, dyn dynamic.Interface, name string) error {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": int64(1)}}}
	u.SetAPIVersion("demo.kubewire.io/v1")
	u.SetKind("Widget")
	u.SetName(name)
	_, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// churn creates, updates and deletes an object about every second so the
// stream stays alive. Failures are reported and the loop goes on.
func churn(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		name := fmt.Sprintf("settings-%d", rand.N(3))
		switch n % 4 {
		case 0:
			err = createConfigMap(ctx, kube, fmt.Sprintf("churn-%d", n))
		case 1:
			var cm *corev1.ConfigMap
			if cm, err = kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				cm.Data["level"] = fmt.Sprint(n)
				_, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			}
		case 2:
			err = kube.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("churn-%d", n-2), metav1.DeleteOptions{})
		case 3:
			w := fmt.Sprintf("widget-%d", rand.N(3))
			var u *unstructured.Unstructured
			if u, err = dyn.Resource(widgets).Namespace(ns).Get(ctx, w, metav1.GetOptions{}); err == nil {
				_ = unstructured.SetNestedField(u.Object, int64(n), "spec", "size")
				_, err = dyn.Resource(widgets).Namespace(ns).Update(ctx, u, metav1.UpdateOptions{})
			}
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "demo: churn:", err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
