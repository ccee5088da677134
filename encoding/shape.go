package encoding

import (
	"encoding/json"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// provenance is the value of the changedby extensions.
type provenance struct{ manager, operation, time string }

// changedBy returns the provenance of the change's object. Deletes have
// none: a delete writes no managedFields entry, so the newest entry names
// whoever last edited the object, not whoever deleted it, and would mislead
// an audit.
func changedBy(c *informer.Change) (provenance, bool) {
	if c.Op == informer.OpDeleted {
		return provenance{}, false
	}
	cb, ok := c.Object.ChangedBy()
	return provenance{cb.Manager, cb.Operation, cb.Time}, ok
}

// set adds the changedby extensions that have a value.
func (p provenance) set(e *Event) {
	if p.manager != "" {
		e.SetExtension(ExtChangedBy, p.manager)
	}
	if p.operation != "" {
		e.SetExtension(ExtChangeOp, p.operation)
	}
	if p.time != "" {
		e.SetExtension(ExtChangeTime, p.time)
	}
}

// objectData is the data of an object event in the resource's payload mode.
// kubewire's private key never reaches it. In the full mode on the raw
// cache it is the cached bytes themselves, shared by every sink.
func objectData(c *informer.Change) ([]byte, error) {
	o := c.Object
	switch c.Resource.Payload {
	case shape.PayloadReference:
		return json.Marshal(shape.Reference{
			APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(),
			Name: o.GetName(), UID: string(o.GetUID()), ResourceVersion: o.GetResourceVersion(),
		})
	case shape.PayloadDiff:
		data, err := o.Data()
		if err != nil {
			return nil, err
		}
		d := shape.DiffData{Object: data}
		if c.Op == informer.OpUpdated && c.OldObject != nil {
			old, err := c.OldObject.Data()
			if err != nil {
				return nil, err
			}
			if d.Patch, err = shape.Patch(old, data); err != nil {
				return nil, err
			}
		}
		return json.Marshal(d)
	default:
		return o.Data()
	}
}
