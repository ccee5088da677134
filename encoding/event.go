// Package encoding builds the CloudEvents of the event contract (docs/events.md)
// from informer Changes.
package encoding

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/informer"
)

// TypePrefix is the common prefix of every CloudEvent type kubewire emits.
const TypePrefix = "io.kubewire."

// The CloudEvent types of contract version 1.
const (
	TypeAdded             = TypePrefix + "object.added"
	TypeUpdated           = TypePrefix + "object.updated"
	TypeDeleted           = TypePrefix + "object.deleted"
	TypeSynced            = TypePrefix + "object.synced"
	TypeSnapshotStarted   = TypePrefix + "snapshot.started"
	TypeSnapshotCompleted = TypePrefix + "snapshot.completed"
)

// Extension attribute names. CloudEvents limits them to lowercase
// alphanumerics; every value is a string, because sdk-go rejects int64.
const (
	ExtPartitionKey      = "partitionkey"
	ExtAPIVersion        = "apiversion"
	ExtKind              = "kind"
	ExtNamespace         = "namespace"
	ExtName              = "name"
	ExtUID               = "uid"
	ExtResourceVersion   = "resourceversion"
	ExtCluster           = "cluster"
	ExtSnapshotID        = "snapshotid"
	ExtFinalStateUnknown = "finalstateunknown"
)

var types = map[informer.Op]string{
	informer.OpAdded:             TypeAdded,
	informer.OpUpdated:           TypeUpdated,
	informer.OpDeleted:           TypeDeleted,
	informer.OpSynced:            TypeSynced,
	informer.OpSnapshotStarted:   TypeSnapshotStarted,
	informer.OpSnapshotCompleted: TypeSnapshotCompleted,
}

// SnapshotMarker is the data of snapshot.started and snapshot.completed.
type SnapshotMarker struct {
	SnapshotID string `json:"snapshotId"`
	Group      string `json:"group"`
	Version    string `json:"version"`
	Resource   string `json:"resource"`
	// Count is the number of records in the snapshot; only on completed.
	Count *int `json:"count,omitempty"`
}

// Event builds the CloudEvent for c. Its id is deterministic, so the same
// change observed twice (a retry, a restart) deduplicates.
func Event(c *informer.Change) (*event.Event, error) {
	typ, ok := types[c.Op]
	if !ok {
		return nil, fmt.Errorf("encoding: unknown change op %q", c.Op)
	}
	r := c.Resource
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetType(typ)
	ev.SetSource(r.Source)
	ev.SetTime(c.Observed)
	ev.SetExtension(ExtPartitionKey, c.Key)
	ev.SetExtension(ExtCluster, r.Cluster)
	ev.SetExtension(ExtAPIVersion, r.APIVersion())
	ev.SetExtension(ExtKind, r.Kind)

	var data []byte
	var err error
	if c.IsMarker() {
		ev.SetID(c.SnapshotID + "/" + string(c.Op))
		ev.SetExtension(ExtSnapshotID, c.SnapshotID)
		m := SnapshotMarker{SnapshotID: c.SnapshotID, Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource}
		if c.Op == informer.OpSnapshotCompleted {
			n := c.Count
			m.Count = &n
		}
		data, err = json.Marshal(m)
	} else {
		o := objectOf(c)
		if o == nil {
			return nil, fmt.Errorf("encoding: %s change for %s has no object", c.Op, c.Key)
		}
		ns, name, uid, rv := o.GetNamespace(), o.GetName(), string(o.GetUID()), o.GetResourceVersion()
		id := uid + "/" + rv + "/" + string(c.Op)
		if c.SnapshotID != "" {
			id += "/" + c.SnapshotID
			ev.SetExtension(ExtSnapshotID, c.SnapshotID)
		}
		ev.SetID(id)
		if ns == "" {
			ev.SetSubject(name)
		} else {
			ev.SetSubject(ns + "/" + name)
			ev.SetExtension(ExtNamespace, ns)
		}
		ev.SetExtension(ExtName, name)
		ev.SetExtension(ExtUID, uid)
		ev.SetExtension(ExtResourceVersion, rv)
		if c.FinalStateUnknown {
			ev.SetExtension(ExtFinalStateUnknown, strconv.FormatBool(true))
		}
		setChangedBy(&ev, c)
		data, err = objectData(c)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding: marshal data of %s: %w", c.Key, err)
	}
	// The bytes are JSON already: set them directly, because SetData would
	// mark []byte as binary and structured mode would then base64 them.
	ev.SetDataContentType(event.ApplicationJSON)
	ev.DataEncoded = data
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encoding: event for %s is invalid: %w", c.Key, err)
	}
	return &ev, nil
}
