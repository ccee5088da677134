package encoding

import (
	"encoding/json"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/shape"
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
	if c.Raw != nil {
		return rawChangedBy(c.Raw)
	}
	cb, ok := shape.ChangedByOf(c.Object.Object)
	return provenance{cb.Manager, cb.Operation, cb.Time}, ok
}

// count is the number of extensions set adds.
func (p provenance) count() int {
	n := 0
	for _, v := range [...]string{p.manager, p.operation, p.time} {
		if v != "" {
			n++
		}
	}
	return n
}

// set adds the changedby extensions that have a value.
func (p provenance) set(ext map[string]any) {
	if p.manager != "" {
		ext[ExtChangedBy] = p.manager
	}
	if p.operation != "" {
		ext[ExtChangeOp] = p.operation
	}
	if p.time != "" {
		ext[ExtChangeTime] = p.time
	}
}

// objectData is the data of an object event in the resource's payload mode.
// kubewire's private key never reaches it.
func objectData(c *informer.Change) ([]byte, error) {
	if c.Raw != nil {
		return rawData(c)
	}
	o := c.Object.Object
	switch c.Resource.Payload {
	case shape.PayloadReference:
		u := c.Object
		return json.Marshal(shape.Reference{
			APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
			Name: u.GetName(), UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion(),
		})
	case shape.PayloadDiff:
		var old map[string]any
		if c.Op == informer.OpUpdated && c.OldObject != nil {
			old = c.OldObject.Object
		}
		return shape.Diff(old, o)
	default:
		return shape.Marshal(o)
	}
}
