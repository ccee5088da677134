package encoding

import (
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cetypes "github.com/cloudevents/sdk-go/v2/types"
)

// Event is one CloudEvent of the event contract (CloudEvents 1.0) as
// kubewire carries it from the dispatcher to the sinks. Every attribute and
// extension value is the string a binding writes, so an adapter builds its
// broker message straight from it.
//
// It is not sdk-go's event.Event on purpose: that type keeps its
// extensions in a map of boxed values, its accessors copy the map, and
// building one costs about a dozen allocations, on the path of every
// change. CloudEvent gives sdk-go's view of the same event, for the modes
// and adapters that go through sdk-go, and for the tests that hold the
// direct bindings to what sdk-go writes.
//
// An Event is shared by every sink that sends it and must not be changed
// once handed to a dispatcher; Clone it first.
type Event struct {
	id, typ, source, subject string
	contentType, dataSchema  string
	time                     time.Time
	data                     []byte

	// The extensions in the order they were set, names unique. kubewire's
	// own fit in ext, so an event is one allocation; more takes the rest.
	ext  [inlineExtensions]Extension
	n    int
	more []Extension

	// idBuf holds the id's bytes (see setID): a Kubernetes uid, a
	// resourceVersion, an op and a snapshot id fit.
	idBuf [112]byte
}

// Extension is one extension attribute: its name (lowercase) and value.
type Extension struct{ Name, Value string }

// inlineExtensions is how many extensions an Event holds without another
// allocation: every extension kubewire sets fits.
const inlineExtensions = 16

// SpecVersion is always 1.0.
func (e *Event) SpecVersion() string { return event.CloudEventsVersionV1 }

// ID is the event's id.
func (e *Event) ID() string { return e.id }

// Type is the event's type.
func (e *Event) Type() string { return e.typ }

// Source is the event's source, as written in a header.
func (e *Event) Source() string { return e.source }

// Subject is the event's subject, "" when it has none.
func (e *Event) Subject() string { return e.subject }

// DataContentType is the event's datacontenttype, "" when it has none.
func (e *Event) DataContentType() string { return e.contentType }

// DataSchema is the event's dataschema, "" when it has none.
func (e *Event) DataSchema() string { return e.dataSchema }

// Time is the event's time, zero when it has none.
func (e *Event) Time() time.Time { return e.time }

// Data is the event's data as sent: JSON for every event kubewire builds.
func (e *Event) Data() []byte { return e.data }

// Extension returns the value of extension name, "" when it is not set.
func (e *Event) Extension(name string) string {
	v, _ := e.Lookup(name)
	return v
}

// Lookup returns the value of extension name and whether it is set.
func (e *Event) Lookup(name string) (string, bool) {
	for i := range e.n {
		if e.ext[i].Name == name {
			return e.ext[i].Value, true
		}
	}
	for _, x := range e.more {
		if x.Name == name {
			return x.Value, true
		}
	}
	return "", false
}

// Len is the number of extensions.
func (e *Event) Len() int { return e.n + len(e.more) }

// At returns extension i, in the order they were set: with Len, a way to
// visit every extension that neither allocates nor copies.
func (e *Event) At(i int) Extension {
	if i < e.n {
		return e.ext[i]
	}
	return e.more[i-e.n]
}

// Extensions returns a new map of the extensions, as sdk-go's accessor of
// the same name does; bindings use Len and At instead.
func (e *Event) Extensions() map[string]any {
	m := make(map[string]any, e.Len())
	for i := range e.Len() {
		x := e.At(i)
		m[x.Name] = x.Value
	}
	return m
}

// SetExtension sets extension name (a CloudEvents extension name: lowercase
// letters and digits; it is lowercased as sdk-go does) to value.
func (e *Event) SetExtension(name, value string) {
	name = strings.ToLower(name) // free when it is lowercase already
	for i := range e.n {
		if e.ext[i].Name == name {
			e.ext[i].Value = value
			return
		}
	}
	for i := range e.more {
		if e.more[i].Name == name {
			e.more[i].Value = value
			return
		}
	}
	if e.n < len(e.ext) {
		e.ext[e.n] = Extension{name, value}
		e.n++
		return
	}
	e.more = append(e.more, Extension{name, value})
}

// Clone returns a copy that can be changed without changing e. The data is
// shared: no one changes an event's data in place.
func (e *Event) Clone() *Event {
	c := *e
	c.more = append([]Extension(nil), e.more...)
	return &c
}

// CloudEvent returns sdk-go's event.Event with the same attributes,
// extensions and data.
func (e *Event) CloudEvent() *event.Event {
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(e.id)
	ev.SetType(e.typ)
	ev.SetSource(e.source)
	if e.subject != "" {
		ev.SetSubject(e.subject)
	}
	if e.contentType != "" {
		ev.SetDataContentType(e.contentType)
	}
	if e.dataSchema != "" {
		ev.SetDataSchema(e.dataSchema)
	}
	if !e.time.IsZero() {
		ev.SetTime(e.time)
	}
	for i := range e.Len() {
		x := e.At(i)
		ev.SetExtension(x.Name, x.Value)
	}
	// The bytes are JSON already: SetData would mark []byte as binary and
	// structured mode would then base64 them.
	ev.DataEncoded = e.data
	return &ev
}

// FromCloudEvent is the Event of sdk-go's ev: for events that did not come
// from a Change (tests, tools), and for an event read back from a spool. An
// event that sdk-go finds invalid is refused. Extension values are written
// as sdk-go's bindings write them. The data is kept as its bytes; whether
// sdk-go would base64 them in the JSON format is not, because every event
// kubewire sends has JSON data, which that format carries as it is.
func FromCloudEvent(ev *event.Event) (*Event, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encoding: invalid CloudEvent: %w", err)
	}
	e := &Event{
		id: ev.ID(), typ: ev.Type(), source: ev.Source(), subject: ev.Subject(),
		contentType: ev.DataContentType(), dataSchema: ev.DataSchema(), time: ev.Time(), data: ev.Data(),
	}
	for name, v := range ev.Extensions() {
		s, err := cetypes.Format(v)
		if err != nil {
			return nil, fmt.Errorf("encoding: extension %s of event %s: %w", name, ev.ID(), err)
		}
		e.SetExtension(name, s)
	}
	return e, nil
}

// String describes the event for logs and test failures.
func (e *Event) String() string { return e.CloudEvent().String() }
