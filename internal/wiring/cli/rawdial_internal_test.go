//go:build linux

package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/base/rawsock"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// kubewire's connections to the apiserver must be raw sockets: client-go
// dials with package net when rest.Config.Dial is nil, and nothing else
// would notice (docs/benchmarks.md, "The apiserver's connection").
func TestTheAPIServerIsDialedWithRawSystemCalls(t *testing.T) {
	addr := testkit.ClosingListener(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://`+addr+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, _, err := restConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Dial == nil {
		t.Fatal("the rest.Config has no Dial: client-go would dial with package net's calls")
	}
	c, err := rc.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !rawsock.Raw(c) {
		t.Fatalf("Dial gave %T, want a raw socket", c)
	}

	// A Dial set already is the caller's, and stays.
	called := false
	own := &rest.Config{Dial: func(context.Context, string, string) (net.Conn, error) { called = true; return nil, nil }}
	rawDial(own)
	own.Dial(context.Background(), "tcp", "x")
	if !called {
		t.Error("rawDial replaced a Dial already set")
	}
}
