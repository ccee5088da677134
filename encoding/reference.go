package encoding

import (
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	cetypes "github.com/cloudevents/sdk-go/v2/types"
)

// ExtPayload marks an event whose data is a reference to the object instead
// of the object itself, because the full event was larger than the broker
// accepts. Its value is PayloadReference.
const (
	ExtPayload       = "payload"
	PayloadReference = "reference"
)

// referenceData is the data of a reference event: enough for a consumer to
// GET the object at that resourceVersion from the API server.
type referenceData struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   referenceMetadata `json:"metadata"`
}

type referenceMetadata struct {
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// ReferenceEvent returns a copy of ev whose data only names the object, and
// that carries ExtPayload=reference. Every sink sends it in place of an
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
	ref := referenceData{
		APIVersion: str(ExtAPIVersion),
		Kind:       str(ExtKind),
		Metadata: referenceMetadata{
			Namespace:       str(ExtNamespace),
			Name:            str(ExtName),
			UID:             str(ExtUID),
			ResourceVersion: str(ExtResourceVersion),
		},
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
