package cli_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/testing/testcluster"
)

// limitedUser authenticates to the test cluster with no permissions beyond
// those a test grants it.
const limitedUser = "limited"

// The test cluster starts on first use, so the package's offline tests do
// not wait for an apiserver, and is stopped after the last test.
var (
	clusterOnce sync.Once
	cluster     *testcluster.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(endlessDrainEnv) != "" {
		endlessDrainMain()
	}
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test cluster:", err)
		}
	}
	os.Exit(code)
}

// testCluster returns the package's cluster, starting it the first time.
func testCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cluster, clusterErr = testcluster.Start(ctx, testcluster.Options{Progress: os.Stderr, Users: []testcluster.User{{Name: limitedUser}}})
	})
	if clusterErr != nil {
		t.Fatalf("starting the test cluster: %v", clusterErr)
	}
	return cluster
}
