package natstest

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Embedded runs a real nats-server with JetStream inside the test process,
// on a free port with its store in the test's temporary directory, and
// shuts it down when the test ends. Start (a separate process) is for tests
// that kill or restart the server.
func Embedded(tb testing.TB) *natsserver.Server {
	tb.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}
