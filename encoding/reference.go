package encoding

import (
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/internal/base/shape"
)

// ReferenceEvent returns a copy of ev whose data only names the object, in
// the shape of the reference payload mode (docs/events.md), and that carries
// ExtPayload=reference. Every sink sends it in place of an
// event its broker refuses as too large. The id stays: it is the same
// change, and a consumer that deduplicates must treat it as such.
// Everything it needs is in ev's extensions, so the object is not decoded
// again.
func ReferenceEvent(ev *Event) (*Event, error) {
	ref := shape.Reference{
		APIVersion:      ev.Extension(ExtAPIVersion),
		Kind:            ev.Extension(ExtKind),
		Namespace:       ev.Extension(ExtNamespace),
		Name:            ev.Extension(ExtName),
		UID:             ev.Extension(ExtUID),
		ResourceVersion: ev.Extension(ExtResourceVersion),
	}
	if ref.Name == "" || ref.UID == "" {
		return nil, fmt.Errorf("event %s names no object, so it has no reference event", ev.ID())
	}
	data, err := json.Marshal(ref)
	if err != nil {
		return nil, fmt.Errorf("reference data of event %s: %w", ev.ID(), err)
	}
	c := ev.Clone()
	c.SetExtension(ExtPayload, PayloadReference)
	c.contentType = event.ApplicationJSON
	c.data = data
	return c, nil
}
