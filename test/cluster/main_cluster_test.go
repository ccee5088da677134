//go:build cluster

package nodecluster_test

import (
	"os"
	"testing"

	"github.com/kubewire/kubewire/internal/testing/nodecluster"
)

func TestMain(m *testing.M) { os.Exit(nodecluster.Main(m)) }
