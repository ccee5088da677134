// Command kubewire streams Kubernetes object changes into message brokers as
// CloudEvents. See the README and docs/.
package main

import (
	"os"

	"github.com/kubewire/kubewire/internal/wiring/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
