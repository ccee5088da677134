package sinks

// ConnectionNotifier is an optional interface of a Sink whose client learns
// that its connection dropped or came back between writes (the NATS
// client's disconnect and reconnect callbacks, say). Without it a sink's
// health changes only with the outcome of a write, so an idle sink whose
// broker went away would look healthy until the next change.
//
// The dispatcher calls NotifyConnection once, before Connect. The sink then
// calls up(false) when its connection is lost and up(true) when it is
// established again; calls may come from any goroutine, must not block, and
// repeating a state is harmless. A sink stays healthy only while it is up
// and its last write succeeded.
type ConnectionNotifier interface {
	NotifyConnection(up func(bool))
}
