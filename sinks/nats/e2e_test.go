//go:build e2e

package nats_test

import (
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/natstest"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// process adapts natstest.Server to the broker helpers.
type process struct{ s *natstest.Server }

func (p *process) start(testing.TB) { p.s.Begin() }
func (p *process) stop()            { p.s.Stop() }
func (p *process) url() string      { return p.s.URL() }

func TestE2EJetStreamOnANatsServerProcessPassesTheConformanceSuiteAcrossARestart(t *testing.T) {
	s := natstest.Start(t)
	s.Stop() // newBroker starts it through the adapter
	sinktest.Run(t, jetStreamHarness(newBroker(t, &process{s}), config.ContentModeBinary, true))
}
