package cli

import (
	"net"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/internal/base/rawsock"
)

// rawDial makes client-go dial the apiserver through rawsock, with
// client-go's own dial timeout and keep-alive. Each read of package net
// enters the scheduler, and the first after the process went idle wakes
// sysmon, which then naps 20 µs at a time while the event is handled: the
// watch's read of every event paid that wake, as the sinks' answers did
// before they went raw (docs/benchmarks.md). TLS and HTTP/2 are layered
// over the raw connection by client-go as over any other. A Dial set
// already (a caller's) stays.
func rawDial(rc *rest.Config) {
	if rc.Dial != nil {
		return
	}
	d := &rawsock.Dialer{Dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	rc.Dial = d.DialContext
}
