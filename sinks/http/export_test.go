package httpsink

import (
	nethttp "net/http"
	"net/url"
	"testing"
)

// UseProxy makes sinks built from now on until the test ends see proxy as
// the environment's proxy for every URL.
func UseProxy(t *testing.T, proxy *url.URL) {
	prev := proxyFor
	proxyFor = func(*nethttp.Request) (*url.URL, error) { return proxy, nil }
	t.Cleanup(func() { proxyFor = prev })
}
