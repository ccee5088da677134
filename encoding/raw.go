package encoding

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/shape"
)

// objectOf returns the metadata of the change's object on either cache
// path, or nil for a change without one.
func objectOf(c *informer.Change) metav1.Object {
	switch {
	case c.Object != nil:
		return c.Object
	case c.Raw != nil:
		return c.Raw
	}
	return nil
}

// rawChangedBy is changedBy for the raw path: the raw ListerWatcher read
// the newest managedFields entry before cutting them.
func rawChangedBy(o *raw.Object) (provenance, bool) {
	cb, ok := o.ChangedBy()
	return provenance{cb.Manager, cb.Operation, cb.Time}, ok
}

// rawData is objectData for the raw path. In the full payload mode the data
// is the cached bytes themselves: no decode, no marshal, no copy. They are
// shared by every sink and must not be modified (their capacity equals
// their length, so an append copies).
func rawData(c *informer.Change) ([]byte, error) {
	o := c.Raw
	switch c.Resource.Payload {
	case shape.PayloadReference:
		return json.Marshal(shape.Reference{
			APIVersion: o.Get("apiVersion").String(), Kind: o.Get("kind").String(), Namespace: o.GetNamespace(),
			Name: o.GetName(), UID: string(o.GetUID()), ResourceVersion: o.GetResourceVersion(),
		})
	case shape.PayloadDiff:
		d := shape.DiffData{Object: o.JSON}
		if c.Op == informer.OpUpdated && c.OldRaw != nil {
			var err error
			if d.Patch, err = shape.Patch(c.OldRaw.JSON, o.JSON); err != nil {
				return nil, err
			}
		}
		return json.Marshal(d)
	default:
		return o.JSON, nil
	}
}
