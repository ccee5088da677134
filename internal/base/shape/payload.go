package shape

import (
	"encoding/json"
	"fmt"

	"github.com/wI2L/jsondiff"
)

// Payload modes: what an object event's data holds.
const (
	// PayloadFull is the object after transforms.
	PayloadFull = "full"
	// PayloadReference is the object's identity and version only.
	PayloadReference = "reference"
	// PayloadDiff is {"object": <object>} and, on updates, also
	// "patch": an RFC 6902 JSON Patch from the previous object to this one.
	PayloadDiff = "diff"
)

// PayloadModes lists the payload modes.
func PayloadModes() []string { return []string{PayloadFull, PayloadReference, PayloadDiff} }

// Reference is the data of the reference payload mode.
type Reference struct {
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// DiffData is the data of the diff payload mode.
type DiffData struct {
	Object json.RawMessage `json:"object"`
	// Patch is absent on anything but updates.
	Patch json.RawMessage `json:"patch,omitempty"`
}

// Marshal returns the JSON of obj without kubewire's private key.
func Marshal(obj map[string]any) ([]byte, error) {
	return json.Marshal(Public(obj))
}

// Diff returns the diff-mode data of an update from old to new: the new
// object and the patch that turns old into it. old nil (not an update)
// gives the object alone.
func Diff(old, new map[string]any) ([]byte, error) {
	obj, err := Marshal(new)
	if err != nil {
		return nil, err
	}
	d := DiffData{Object: obj}
	if old != nil {
		prev, err := Marshal(old)
		if err != nil {
			return nil, err
		}
		if d.Patch, err = Patch(prev, obj); err != nil {
			return nil, err
		}
	}
	return json.Marshal(d)
}

// Patch returns the RFC 6902 JSON Patch, as JSON, that turns the object old
// into new; "[]" when they are equal.
func Patch(old, new []byte) (json.RawMessage, error) {
	patch, err := jsondiff.CompareJSON(old, new)
	if err != nil {
		return nil, fmt.Errorf("shape: diff: %w", err)
	}
	if patch == nil {
		patch = jsondiff.Patch{}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("shape: diff: %w", err)
	}
	return b, nil
}
