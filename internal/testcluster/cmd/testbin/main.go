// Command testbin builds the kube-apiserver and etcd binaries used by
// internal/testcluster ahead of time, so that CI caches them and the first
// test run does not spend minutes compiling inside a test timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kubewire/kubewire/internal/testcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bins, err := testcluster.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	fmt.Printf("kube-apiserver %s: %s\n", testcluster.KubernetesVersion, bins.APIServer)
	fmt.Printf("etcd %s: %s\n", testcluster.EtcdVersion, bins.Etcd)
}
