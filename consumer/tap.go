package consumer

import "github.com/cloudevents/sdk-go/v2/event"

// Read is one message as a source read it, before the View applies it.
// Options.OnRead gets every one of them, in the order they are applied:
// it is the way to see the stream itself (an audit log, `kubewire tail`)
// rather than the state the View builds from it.
type Read struct {
	// Kind is what was read: ReadEvent, ReadTombstone, ReadGap or
	// ReadMalformed.
	Kind string
	// Position is where the message sits; for a gap, the offset reading
	// goes on from.
	Position Position
	// Event is the event read (ReadEvent only). It is shared with the
	// View: do not modify it.
	Event *event.Event
	// Key is the partition key: the event's, or a tombstone's record key.
	Key string
	// Err says why a message is not an event (ReadMalformed only).
	Err error
}

// Read kinds.
const (
	// ReadEvent is a CloudEvent.
	ReadEvent = "event"
	// ReadTombstone is a Kafka record with a key and no value.
	ReadTombstone = "tombstone"
	// ReadGap says events of the partition were lost before Position (see
	// View.Gap); no message was read.
	ReadGap = "gap"
	// ReadMalformed is a message that could not be decoded as an event.
	ReadMalformed = "malformed"
)

// tap passes r to Options.OnRead; applyMu is held, so reads reach it in the
// order they are applied.
func (v *View) tap(r Read) {
	if v.opt.OnRead != nil {
		v.opt.OnRead(r)
	}
}
