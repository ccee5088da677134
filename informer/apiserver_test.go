package informer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// fakeAPIServer serves LIST and WATCH of core/v1 configmaps over real HTTP,
// so both caches run their real clients. The list holds what newFake was
// given; watch events are sent one at a time by the test, each returning
// once the client has read it.
type fakeAPIServer struct {
	srv     *httptest.Server
	list    string
	events  chan string
	watches atomic.Int32 // watch requests still open
}

func newFakeAPIServer(t *testing.T, listRV string, items ...string) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{events: make(chan string)}
	f.list = `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"` + listRV + `"},"items":[`
	for i, it := range items {
		if i > 0 {
			f.list += ","
		}
		f.list += it
	}
	f.list += "]}"
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/configmaps" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") != "true" {
		_, _ = w.Write([]byte(f.list))
		return
	}
	f.watches.Add(1)
	defer f.watches.Add(-1)
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-f.events:
			_, _ = w.Write([]byte(ev + "\n"))
			w.(http.Flusher).Flush()
		}
	}
}

// modify sends a MODIFIED event of configmap ns/name at resourceVersion rv.
func (f *fakeAPIServer) modify(t *testing.T, name, rv string) {
	t.Helper()
	select {
	case f.events <- `{"type":"MODIFIED","object":` + configMapJSON(name, rv) + `}`:
	case <-time.After(time.Minute):
		t.Fatalf("no watch took the update of %s to rv %s", name, rv)
	}
}

func configMapJSON(name, rv string) string {
	return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns","uid":"uid-%s","resourceVersion":%q},"data":{"rv":%q}}`,
		name, name, rv, rv)
}

// noWatchList makes a client report that it cannot stream lists, so the
// reflector does a plain LIST then WATCH against the fake server.
type noWatchList struct{ rest.Interface }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

type noWatchListDynamic struct{ dynamic.Interface }

func (noWatchListDynamic) IsWatchListSemanticsUnSupported() bool { return true }

// staticMapper knows configmaps only; Reset is a no-op.
type staticMapper struct{ *meta.DefaultRESTMapper }

func (staticMapper) Reset() {}

// syncOutput records Changes from any goroutine.
type syncOutput struct {
	mu  sync.Mutex
	got []*Change
}

func (o *syncOutput) Enqueue(c *Change) {
	o.mu.Lock()
	o.got = append(o.got, c)
	o.mu.Unlock()
}

func (o *syncOutput) changes() []*Change {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*Change(nil), o.got...)
}

// fakeWatcher returns a Watcher of configmaps on f with the given cache.
func fakeWatcher(t *testing.T, f *fakeAPIServer, cache string, out Output) *Watcher {
	t.Helper()
	rc := &rest.Config{Host: f.srv.URL}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	rawREST, err := raw.NewRESTClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	return NewWatcher(Options{
		Cluster:  "c",
		Resource: config.Resource{Version: "v1", Resource: "configmaps", Cache: cache, Sinks: []string{"out"}},
		Dynamic:  noWatchListDynamic{dyn},
		REST:     noWatchList{rawREST},
		Mapper:   staticMapper{m},
		Out:      out,
	})
}

// runWatcher runs w until the test ends and waits for its initial sync.
// The returned stop cancels Run and waits for it, reporting its error.
func runWatcher(t *testing.T, w *Watcher) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Run did not return within a minute of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	testkit.Eventually(t, "the initial sync", w.HasSynced)
	return stop
}

// storedRV is the resourceVersion of ns/name in the informer's store.
func storedRV(w *Watcher, name string) string {
	obj, ok, _ := w.informer.GetStore().GetByKey("ns/" + name)
	if !ok {
		return ""
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// gate holds the handler while closed is false. The zero value lets every
// notification through.
type gate struct {
	mu   sync.Mutex
	hold chan struct{}
}

func (g *gate) close() {
	g.mu.Lock()
	g.hold = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	if g.hold != nil {
		close(g.hold)
		g.hold = nil
	}
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	h := g.hold
	g.mu.Unlock()
	if h != nil {
		<-h
	}
}
