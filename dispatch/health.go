package dispatch

import "github.com/kubewire/kubewire/internal/base/metrics"

// HealthState is a sink's health as /readyz names it.
type HealthState string

const (
	// HealthOK: connected, and the last write succeeded.
	HealthOK HealthState = "healthy"
	// HealthConnecting: the first Connect has not yet succeeded.
	HealthConnecting HealthState = "connecting"
	// HealthDisconnected: the sink reported its connection lost
	// (ConnectionNotifier).
	HealthDisconnected HealthState = "disconnected"
	// HealthFailing: the last write failed and is being retried.
	HealthFailing HealthState = "failing"
)

// Health says whether the sink is healthy and, if not, why.
func (d *Dispatcher) Health() HealthState {
	switch {
	case !d.everConnected.Load():
		return HealthConnecting
	case d.linkDown.Load():
		return HealthDisconnected
	case !d.writesOK.Load():
		return HealthFailing
	}
	return HealthOK
}

// Healthy reports whether the sink is connected and its last write
// succeeded.
func (d *Dispatcher) Healthy() bool { return d.Health() == HealthOK }

// setHealthy records the outcome of a Connect or a Write.
func (d *Dispatcher) setHealthy(ok bool) {
	if ok {
		d.everConnected.Store(true)
	}
	if d.writesOK.Swap(ok) != ok {
		d.publishHealth()
	}
}

// setLinkUp records what the sink reported of its connection.
func (d *Dispatcher) setLinkUp(up bool) {
	if d.linkDown.Swap(!up) != !up {
		if up {
			d.log.Info("sink reports its connection is back")
		} else {
			d.log.Warn("sink reports its connection is lost; unhealthy until it is back")
		}
		d.publishHealth()
	}
}

// publishHealth sets kubewire_sink_healthy from the current state. The lock
// keeps two changes racing each other from leaving the older value behind.
func (d *Dispatcher) publishHealth() {
	d.healthMu.Lock()
	defer d.healthMu.Unlock()
	v := 0.0
	if d.Healthy() {
		v = 1
	}
	metrics.SinkHealthy.WithLabelValues(d.name).Set(v)
}
