package encoding

import (
	"encoding/json"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/shape"
)

// Extensions that say who made a change: the newest entry of the object's
// managedFields when kubewire saw it (docs/events.md).
const (
	ExtChangedBy  = "changedby"
	ExtChangeOp   = "changeop"
	ExtChangeTime = "changetime"
)

// setChangedBy adds the changedby extensions. Deletes get none: a delete
// writes no managedFields entry, so the newest entry names whoever last
// edited the object, not whoever deleted it, and would mislead an audit.
func setChangedBy(ev *event.Event, c *informer.Change) {
	if c.Op == informer.OpDeleted {
		return
	}
	if c.Raw != nil {
		setRawChangedBy(ev, c.Raw)
		return
	}
	cb, ok := shape.ChangedByOf(c.Object.Object)
	if !ok {
		return
	}
	if cb.Manager != "" {
		ev.SetExtension(ExtChangedBy, cb.Manager)
	}
	if cb.Operation != "" {
		ev.SetExtension(ExtChangeOp, cb.Operation)
	}
	if cb.Time != "" {
		ev.SetExtension(ExtChangeTime, cb.Time)
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
