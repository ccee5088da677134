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
)

// reviewCounter counts the SelfSubjectAccessReviews a client creates, by
// the request's path, in front of the real apiserver.
type reviewCounter struct {
	mu sync.Mutex
	n  int
}

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
			c.mu.Lock()
			c.n++
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

// Issue 43's goal: no more than one access check per resource at start. A
// cluster with 100+ resources pays each check once per resource, so two
// (list, then watch) doubles what the start costs the apiserver.
func TestEachResourceIsCheckedWithOneAccessReviewAtStart(t *testing.T) {
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
}
