// Package informer turns the notifications of client-go reflectors into
// ordered Changes, and frames initial lists and periodic resyncs as snapshots.
package informer

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Op is what happened to an object, or which snapshot marker a Change is.
type Op string

// The operations of the event contract (docs/events.md). The string values
// are the suffixes of the CloudEvent types.
const (
	OpAdded   Op = "added"
	OpUpdated Op = "updated"
	OpDeleted Op = "deleted"
	OpSynced  Op = "synced"

	OpSnapshotStarted   Op = "started"
	OpSnapshotCompleted Op = "completed"

	// OpGap declares that versions of the resource's objects may be
	// missing from the stream: the Change's Gap says which. It goes out
	// like a snapshot marker, to every partition, and a snapshot follows.
	OpGap Op = "gap"

	// OpRemoved says the resource itself is gone from the cluster (its
	// CustomResourceDefinition was deleted): every object of it that a
	// consumer still holds is gone too, whether or not its delete was
	// streamed. It goes out like a snapshot marker, to every partition,
	// and nothing of the resource follows it.
	OpRemoved Op = "removed"
)

// Gap reasons: why a watch stream could not go on from where it was.
const (
	// GapExpired: the apiserver no longer holds the history after the
	// checkpoint (410 Gone, "too old resource version").
	GapExpired = "expired"
	// GapTooLarge: the checkpoint is ahead of what the apiserver holds
	// (an etcd restored from backup).
	GapTooLarge = "too-large"
	// GapConfigChanged: the checkpoint was written under a different
	// config, so what it says was delivered no longer holds.
	GapConfigChanged = "config-changed"
)

// Gap is the range of resourceVersions (From, To] of one watch stream in
// which changes may have been lost: From is the last version known to be
// delivered (the checkpoint), To the version of the list that took over.
type Gap struct {
	// Namespace is the namespace of a stream watched per namespace, ""
	// for a cluster-wide watch.
	Namespace string
	From, To  string
	Reason    string
	// Backwards says the API server's history is behind the stream's (etcd
	// restored from a backup): versions up to To may be missing, and the
	// versions the stream carried after From belong to a history that no
	// longer exists; numbers at or below To may come again with other
	// content. The range (From, To] is then empty, and says nothing.
	Backwards bool
}

// Resource is a configured resource after it has been resolved against the
// server's discovery information. It is shared by every Change of that
// resource and must not be modified after the informer starts.
type Resource struct {
	Cluster    string
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool

	// Source is the CloudEvent source of every event of this resource.
	Source string
	// KeyPrefix is "<resource>" for the core group and "<resource>.<group>"
	// otherwise. Object keys are "<prefix>/<namespace>/<name>" or
	// "<prefix>/<name>"; snapshot markers use the prefix alone.
	KeyPrefix string
	// Payload is the configured payload mode (shape.PayloadFull, ...); ""
	// means full.
	Payload string
}

// APIVersion is the apiVersion of the resource's objects ("v1", "apps/v1").
func (r *Resource) APIVersion() string {
	return r.GVR.GroupVersion().String()
}

// NewResource fills in the derived fields of a resolved resource.
func NewResource(cluster string, gvr schema.GroupVersionResource, kind string, namespaced bool) *Resource {
	r := &Resource{Cluster: cluster, GVR: gvr, Kind: kind, Namespaced: namespaced}
	if gvr.Group == "" {
		r.Source = "/clusters/" + cluster + "/api/" + gvr.Version + "/" + gvr.Resource
		r.KeyPrefix = gvr.Resource
	} else {
		r.Source = "/clusters/" + cluster + "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
		r.KeyPrefix = gvr.Resource + "." + gvr.Group
	}
	return r
}

// ObjectKey is the partition key of one object: unique across every resource
// of the cluster, so per-key order is per-object order.
func (r *Resource) ObjectKey(namespace, name string) string {
	return objectKey(r.KeyPrefix, namespace, name)
}

func objectKey(prefix, namespace, name string) string {
	if namespace == "" {
		return prefix + "/" + name
	}
	return prefix + "/" + namespace + "/" + name
}

// Change is one notification on its way to the sinks. It is immutable once
// enqueued: several sink dispatchers read the same Change concurrently.
type Change struct {
	Op       Op
	Resource *Resource
	// Key is the partition key: the object key, or the resource's KeyPrefix
	// for snapshot markers.
	Key string
	// Object is the object after transforms. For a delete it is the last
	// state the informer knew. Nil for snapshot markers.
	Object Object
	// OldObject is the previous state, for updates only.
	OldObject Object
	// FinalStateUnknown marks a delete noticed only through a relist
	// (cache.DeletedFinalStateUnknown): Object may be older than the
	// object's real final state.
	FinalStateUnknown bool
	// SnapshotID is set on synced records and on snapshot markers.
	SnapshotID string
	// Count is the number of records of the snapshot, on the completed marker.
	Count int
	// SnapshotRV is set on snapshot markers: the highest resourceVersion
	// the handler had been given (objects, list ends, bookmarks) when the
	// marker was enqueued. Every record between a started and a completed
	// marker is at or below the completed marker's SnapshotRV, so the state
	// the window leaves is the cluster's at that version or later; a reader
	// asking for the state at version N starts from a snapshot whose
	// completed SnapshotRV is at most N. Empty on the initial snapshot's
	// started marker, which is enqueued before its list is read.
	SnapshotRV string
	// Gap is set on OpGap changes only.
	Gap *Gap
	// RemovedUID is, on OpRemoved, the uid of what was removed (the
	// CustomResourceDefinition), so that the event's id is the same
	// however often it is sent.
	RemovedUID string
	// Mark is the change's place in its watch stream: every sink it goes
	// to calls Mark.Done once the change is done for it (acknowledged,
	// folded into a newer change, or refused for good), and the stream's
	// checkpoint moves past it once all have.
	Mark Mark
	// Observed is when kubewire saw the change.
	Observed time.Time
}

// Size is the byte size of the object's JSON where it is known without
// encoding (the raw cache), else 0.
func (c *Change) Size() int64 {
	if c.Object == nil {
		return 0
	}
	return c.Object.Size()
}

// IsMarker reports whether the change frames the stream (a snapshot
// marker or a gap) rather than describing an object. Markers go to every
// partition.
func (c *Change) IsMarker() bool {
	return c.Op == OpSnapshotStarted || c.Op == OpSnapshotCompleted || c.Op == OpGap || c.Op == OpRemoved
}

// ObjectUID returns the uid of the change's object, and false for a marker.
func (c *Change) ObjectUID() (string, bool) {
	if c.Object == nil {
		return "", false
	}
	return string(c.Object.GetUID()), true
}
