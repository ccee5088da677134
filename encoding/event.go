// Package encoding builds the CloudEvents of the event contract (docs/events.md)
// from informer Changes.
package encoding

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cloudevents/sdk-go/v2/event"
	cetypes "github.com/cloudevents/sdk-go/v2/types"

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
	// TypeGap says that changes of a resource in a range of its
	// resourceVersions may be missing from the stream (see Gap); a snapshot
	// of the resource follows it.
	TypeGap = TypePrefix + "watch.gap"
	// TypeRemoved says the resource itself left the cluster (its
	// CustomResourceDefinition was deleted): a consumer drops every
	// object of it that it still holds. See Removed.
	TypeRemoved = TypePrefix + "resource.removed"
)

var types = map[informer.Op]string{
	informer.OpAdded:             TypeAdded,
	informer.OpUpdated:           TypeUpdated,
	informer.OpDeleted:           TypeDeleted,
	informer.OpSynced:            TypeSynced,
	informer.OpSnapshotStarted:   TypeSnapshotStarted,
	informer.OpSnapshotCompleted: TypeSnapshotCompleted,
	informer.OpGap:               TypeGap,
	informer.OpRemoved:           TypeRemoved,
}

// Removed is the data of a resource.removed event.
type Removed struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// UID is the uid of the CustomResourceDefinition that was deleted.
	UID string `json:"uid,omitempty"`
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

// Gap is the data of a watch.gap event: changes of the resource (in
// Namespace, when the resource is watched per namespace) whose
// resourceVersion is in (From, To] may be missing from the stream.
type Gap struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// Namespace is set when the gap is in one namespace's watch only.
	Namespace string `json:"namespace,omitempty"`
	// From is the last resourceVersion known to be delivered, To the
	// version of the list that took over.
	From string `json:"from"`
	To   string `json:"to"`
	// Reason is why the watch could not go on: informer.GapExpired,
	// GapTooLarge or GapConfigChanged.
	Reason string `json:"reason"`
	// Backwards is set when the cluster's versions went backwards (etcd
	// restored from a backup): see informer.Gap.Backwards.
	Backwards bool `json:"backwards,omitempty"`
}

// GapID is the id of a gap event: "<keyprefix>[/<namespace>]/gap/<from>-<to>".
// The same gap sent again (a retry, a restart that declares it once more)
// has the same id.
func GapID(keyPrefix, namespace, from, to string) string {
	id := keyPrefix
	if namespace != "" {
		id += "/" + namespace
	}
	return strings.TrimSpace(id + "/gap/" + from + "-" + to)
}

// New builds the event of c. Its id is deterministic, so the same change
// observed twice (a retry, a restart) deduplicates.
//
// It is on the path of every change, so it costs what it must and no more:
// one allocation for the event (its extensions and, unless it is unusually
// long, its id live in it), and the data when the payload mode has to build
// it. The values that are
// the same for every event of a resource (source, cluster, apiversion,
// kind) are checked once per resource and shared. What sdk-go's setters
// would reject is rejected the same way: the source is checked once per
// resource, and an id is never empty.
func New(c *informer.Change) (*Event, error) {
	typ, ok := types[c.Op]
	if !ok {
		return nil, fmt.Errorf("encoding: unknown change op %q", c.Op)
	}
	r := c.Resource
	ra := attributesOf(r)
	e := &Event{typ: typ, source: ra.source, contentType: event.ApplicationJSON, time: c.Observed}
	e.SetExtension(ExtPartitionKey, c.Key)
	e.SetExtension(ExtCluster, ra.cluster)
	e.SetExtension(ExtAPIVersion, ra.apiVersion)
	e.SetExtension(ExtKind, ra.kind)
	var data []byte
	var err error
	switch {
	case c.Op == informer.OpGap:
		g := c.Gap
		if g == nil {
			return nil, fmt.Errorf("encoding: gap change for %s has no gap", c.Key)
		}
		e.id = GapID(r.KeyPrefix, g.Namespace, g.From, g.To)
		if g.Namespace != "" {
			e.SetExtension(ExtNamespace, g.Namespace)
		}
		data, err = json.Marshal(Gap{Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource,
			Namespace: g.Namespace, From: g.From, To: g.To, Reason: g.Reason, Backwards: g.Backwards})
	case c.Op == informer.OpRemoved:
		e.id = strings.TrimSpace(r.KeyPrefix + "/removed/" + c.RemovedUID)
		data, err = json.Marshal(Removed{Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource, UID: c.RemovedUID})
	case c.IsMarker():
		e.id = strings.TrimSpace(c.SnapshotID + "/" + string(c.Op))
		e.SetExtension(ExtSnapshotID, c.SnapshotID)
		if c.SnapshotRV != "" {
			e.SetExtension(ExtSnapshotRV, c.SnapshotRV)
		}
		m := SnapshotMarker{SnapshotID: c.SnapshotID, Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource}
		if c.Op == informer.OpSnapshotCompleted {
			n := c.Count
			m.Count = &n
		}
		data, err = json.Marshal(m)
	default:
		o := c.Object
		if o == nil {
			return nil, fmt.Errorf("encoding: %s change for %s has no object", c.Op, c.Key)
		}
		ns, name, uid, rv := o.GetNamespace(), o.GetName(), string(o.GetUID()), o.GetResourceVersion()
		if c.SnapshotID != "" {
			e.SetExtension(ExtSnapshotID, c.SnapshotID)
		}
		e.setID(uid, rv, string(c.Op), c.SnapshotID)
		if ns != "" {
			e.subject = strings.TrimSpace(subjectOf(c.Key, ns, name))
			e.SetExtension(ExtNamespace, ns)
		} else {
			e.subject = strings.TrimSpace(name)
		}
		e.SetExtension(ExtName, name)
		e.SetExtension(ExtUID, uid)
		e.SetExtension(ExtResourceVersion, rv)
		if c.FinalStateUnknown {
			e.SetExtension(ExtFinalStateUnknown, "true")
		}
		if cb, ok := changedBy(c); ok {
			cb.set(e)
		}
		data, err = objectData(c)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding: marshal data of %s: %w", c.Key, err)
	}
	e.data = data
	if ra.invalid != nil {
		return nil, fmt.Errorf("encoding: event for %s is invalid: %w", c.Key, ra.invalid)
	}
	return e, nil
}

// setID sets the id of an object's event, "<uid>/<rv>/<op>[/<snapshot>]",
// trimmed as sdk-go's SetID trims (an id always keeps its slashes). It is
// written into the event's own idBuf, so that it costs no allocation of its
// own; the bytes are never written again, which is what makes the string
// over them sound, in the event and in every clone that shares them.
func (e *Event) setID(uid, rv, op, snapshot string) {
	n := len(uid) + 1 + len(rv) + 1 + len(op)
	if snapshot != "" {
		n += 1 + len(snapshot)
	}
	var b []byte
	if n <= len(e.idBuf) {
		b = e.idBuf[:0]
	} else {
		b = make([]byte, 0, n)
	}
	b = append(append(append(append(append(b, uid...), '/'), rv...), '/'), op...)
	if snapshot != "" {
		b = append(append(b, '/'), snapshot...)
	}
	b = bytes.TrimSpace(b)
	e.id = unsafe.String(unsafe.SliceData(b), len(b))
}

// subjectOf returns "<namespace>/<name>". The partition key usually ends
// with exactly that, and then the subject is a slice of it rather than a
// new string.
func subjectOf(key, ns, name string) string {
	if n := len(ns) + 1 + len(name); len(key) >= n {
		s := key[len(key)-n:]
		if s[:len(ns)] == ns && s[len(ns)] == '/' && s[len(ns)+1:] == name {
			return s
		}
	}
	return ns + "/" + name
}

// resourceAttributes are the attribute values that are the same for every
// event of a resource, derived and checked once per resource.
type resourceAttributes struct {
	// from is the resource as these were derived from it; a Resource that
	// was changed since (tests build them by hand) gets them derived anew.
	from informer.Resource

	source, cluster, apiVersion, kind string
	// invalid is what event validation finds wrong with these attributes,
	// the same error sdk-go's setters and Validate give.
	invalid error
}

// maxCachedResources bounds the cache of resource attributes. kubewire
// creates one Resource per watched resource, so the bound is only reached
// by a program that keeps creating Resources; the cache then starts over.
const maxCachedResources = 1024

var (
	attributeCache   sync.Map // *informer.Resource → *resourceAttributes
	attributeEntries atomic.Int64
)

func attributesOf(r *informer.Resource) *resourceAttributes {
	if v, ok := attributeCache.Load(r); ok {
		if ra := v.(*resourceAttributes); sameAttributes(&ra.from, r) {
			return ra
		}
	}
	ra := newResourceAttributes(r)
	if attributeEntries.Add(1) > maxCachedResources {
		attributeCache.Clear()
		attributeEntries.Store(1)
	}
	attributeCache.Store(r, ra)
	return ra
}

func sameAttributes(a, b *informer.Resource) bool {
	return a.Source == b.Source && a.Cluster == b.Cluster && a.GVR == b.GVR && a.Kind == b.Kind
}

func newResourceAttributes(r *informer.Resource) *resourceAttributes {
	ra := &resourceAttributes{from: *r, cluster: r.Cluster, apiVersion: r.APIVersion(), kind: r.Kind}
	// sdk-go's SetSource records a parse error and leaves the source
	// empty, and Validate then reports the source as missing: check a
	// context with this source and otherwise valid attributes the same
	// way. The source is then written as sdk-go writes it back.
	var source cetypes.URIRef
	if u, err := url.Parse(r.Source); err == nil {
		source = cetypes.URIRef{URL: *u}
	}
	ctx := event.EventContextV1{ID: "id", Type: TypeAdded, Source: source}
	if err := ctx.Validate(); err != nil {
		ra.invalid = err
	}
	ra.source = source.String()
	return ra
}
