package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/testing/apptest"
	"github.com/kubewire/kubewire/internal/testing/testcluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// reviewCounter counts the SelfSubjectAccessReviews a client creates, and
// its LISTs by path, in front of the real apiserver.
type reviewCounter struct {
	mu             sync.Mutex
	n              int
	lists, watches map[string]int
}

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
		}
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "s") &&
			(strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/apis/")) {
			c.mu.Lock()
			if c.lists == nil {
				c.lists, c.watches = map[string]int{}, map[string]int{}
			}
			if r.URL.Query().Get("watch") == "" {
				c.lists[r.URL.Path]++
			} else {
				c.watches[r.URL.Path]++
			}
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *reviewCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Issue 43's goals: no more than one LIST and one access check per
// resource at start. A cluster with 100+ resources pays each once per
// resource, so two of either doubles what a start costs the apiserver.
func TestEachResourceIsListedOnceAndCheckedWithOneAccessReviewAtStart(t *testing.T) {
	ns := namespace(t)
	var reviews reviewCounter
	rc := rest.CopyConfig(cluster.RESTConfig(testcluster.AdminUser))
	rc.Wrap(reviews.wrap)
	k := apptest.Start(t, cfgHeader+fmt.Sprintf(`
  - {version: v1, resource: configmaps, sinks: [out]}
  - {version: v1, resource: serviceaccounts, sinks: [out]}
  - {version: v1, resource: services, namespaces: [%s], sinks: [out]}
`, ns), rc)
	for _, r := range []string{"configmaps", "serviceaccounts", "services"} {
		k.WaitFor(t, r+"'s snapshot", completed(r))
	}
	// One review per resource and watch stream: the services are watched
	// in one namespace, the others cluster-wide.
	if got := reviews.count(); got != 3 {
		t.Errorf("%d SelfSubjectAccessReviews at start, want 3 (one per resource)", got)
	}
	paths := []string{"/api/v1/configmaps", "/api/v1/serviceaccounts", "/api/v1/namespaces/" + ns + "/services"}
	// Every request before a watch has been made once the watch is.
	testkit.Eventually(t, "every watch started", func() bool {
		reviews.mu.Lock()
		defer reviews.mu.Unlock()
		for _, path := range paths {
			if reviews.watches[path] == 0 {
				return false
			}
		}
		return true
	})
	reviews.mu.Lock()
	defer reviews.mu.Unlock()
	for _, path := range paths {
		if n := reviews.lists[path]; n != 1 {
			t.Errorf("%d LISTs of %s at start, want 1", n, path)
		}
	}
}
