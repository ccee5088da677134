package encoding

import (
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	cetypes "github.com/cloudevents/sdk-go/v2/types"

	"github.com/kubewire/kubewire/internal/shape"
)

// ReferenceEvent returns a copy of ev whose data only names the object, in
// the shape of the reference payload mode (docs/events.md), and that carries
// ExtPayload=reference. Every sink sends it in place of an
// event its broker refuses as too large. The id stays: it is the same
// change, and a consumer that deduplicates must treat it as such.
// Everything it needs is in ev's extensions, so the object is not decoded
// again.
func ReferenceEvent(ev *event.Event) (*event.Event, error) {
	ext := ev.Extensions()
	str := func(name string) string {
		s, _ := cetypes.Format(ext[name])
		return s
	}
	ref := shape.Reference{
		APIVersion:      str(ExtAPIVersion),
		Kind:            str(ExtKind),
		Namespace:       str(ExtNamespace),
		Name:            str(ExtName),
		UID:             str(ExtUID),
		ResourceVersion: str(ExtResourceVersion),
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
	// The bytes are JSON already. SetData would mark []byte as binary, and
	// structured mode would then send data_base64 under a datacontenttype
	// of application/json, which consumers (Python's SDK) hand over as bytes.
	c.SetDataContentType(event.ApplicationJSON)
	c.DataEncoded = data
	c.DataBase64 = false
	return &c, nil
}
