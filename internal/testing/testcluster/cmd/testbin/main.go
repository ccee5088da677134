// Command testbin builds the kube-apiserver and etcd binaries used by
// internal/testing/testcluster ahead of time, so that CI caches them and the first
// test run does not spend minutes compiling inside a test timeout. With
// -node it also builds the node's components that internal/testing/nodecluster
// runs (make e2e-cluster).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	node := flag.Bool("node", false, "also build "+strings.Join(testcluster.NodeComponents, ", "))
	flag.Parse()
	bins, err := testcluster.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	fmt.Printf("kube-apiserver %s: %s\n", testcluster.KubernetesVersion, bins.APIServer)
	fmt.Printf("etcd %s: %s\n", testcluster.EtcdVersion, bins.Etcd)
	if !*node {
		return
	}
	paths, err := testcluster.EnsureKubernetesBinaries(ctx, os.Stderr, "a minute or more each on 2 cores", testcluster.NodeComponents...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
	for _, name := range testcluster.NodeComponents {
		fmt.Printf("%s %s: %s\n", name, testcluster.KubernetesVersion, paths[name])
	}
}
