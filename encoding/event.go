// Package encoding builds the CloudEvents of the event contract (docs/events.md)
// from informer Changes.
package encoding

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
//
// It fills sdk-go's event types directly rather than through their
// setters, which parse the source URL, box every value into an interface
// and allocate each optional attribute on its own. An event here costs one
// allocation for the event, its context and their attribute values, the
// extensions map, the id, and one per extension value that differs between
// the events of a resource; the values that do not (source, cluster,
// apiversion, kind) are parsed and boxed once per resource. The event is
// the one the setters would build, and what they would reject is rejected
// the same way: the source is checked once per resource, and an id is
// never empty.
func Event(c *informer.Change) (*event.Event, error) {
	typ, ok := types[c.Op]
	if !ok {
		return nil, fmt.Errorf("encoding: unknown change op %q", c.Op)
	}
	r := c.Resource
	ra := attributesOf(r)
	e := &built{contentType: event.ApplicationJSON}
	e.ev.Context = &e.ctx
	e.ctx.Type = typ
	e.ctx.Source = ra.source
	e.ctx.DataContentType = &e.contentType
	if !c.Observed.IsZero() {
		e.time = cetypes.Timestamp{Time: c.Observed}
		e.ctx.Time = &e.time
	}
	var data []byte
	var err error
	if c.IsMarker() {
		e.ctx.ID = strings.TrimSpace(c.SnapshotID + "/" + string(c.Op))
		ext := e.extensions(ra, c, 5)
		ext[ExtSnapshotID] = c.SnapshotID
		m := SnapshotMarker{SnapshotID: c.SnapshotID, Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource}
		if c.Op == informer.OpSnapshotCompleted {
			n := c.Count
			m.Count = &n
		}
		data, err = json.Marshal(m)
	} else {
		o := c.Object
		if o == nil {
			return nil, fmt.Errorf("encoding: %s change for %s has no object", c.Op, c.Key)
		}
		ns, name, uid, rv := o.GetNamespace(), o.GetName(), string(o.GetUID()), o.GetResourceVersion()
		cb, hasCB := changedBy(c)
		n := 7 + cb.count()
		if c.SnapshotID != "" {
			n++
		}
		if ns != "" {
			n++
		}
		if c.FinalStateUnknown {
			n++
		}
		ext := e.extensions(ra, c, n)
		id := uid + "/" + rv + "/" + string(c.Op)
		if c.SnapshotID != "" {
			id += "/" + c.SnapshotID
			ext[ExtSnapshotID] = c.SnapshotID
		}
		// As SetID and SetSubject do; an id always has its slashes left.
		e.ctx.ID = strings.TrimSpace(id)
		if ns != "" {
			e.subject = strings.TrimSpace(subjectOf(c.Key, ns, name))
			ext[ExtNamespace] = ns
		} else {
			e.subject = strings.TrimSpace(name)
		}
		if e.subject != "" {
			e.ctx.Subject = &e.subject
		}
		ext[ExtName] = name
		ext[ExtUID] = uid
		ext[ExtResourceVersion] = rv
		if c.FinalStateUnknown {
			ext[ExtFinalStateUnknown] = trueValue
		}
		if hasCB {
			cb.set(ext, ra)
		}
		data, err = objectData(c)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding: marshal data of %s: %w", c.Key, err)
	}
	// The bytes are JSON already: set them directly, because SetData would
	// mark []byte as binary and structured mode would then base64 them.
	e.ev.DataEncoded = data
	if ra.invalid != nil {
		return nil, fmt.Errorf("encoding: event for %s is invalid: %w", c.Key, ra.invalid)
	}
	return &e.ev, nil
}

// built is an event together with the attribute values its context points
// to, so that they take one allocation.
type built struct {
	ev          event.Event
	ctx         event.EventContextV1
	time        cetypes.Timestamp
	subject     string
	contentType string
}

// extensions gives the event an extensions map sized for n entries (a map
// that grows allocates again) and sets the extensions every event has.
func (e *built) extensions(ra *resourceAttributes, c *informer.Change, n int) map[string]any {
	ext := make(map[string]any, n)
	ext[ExtPartitionKey] = c.Key
	ext[ExtCluster] = ra.cluster
	ext[ExtAPIVersion] = ra.apiVersion
	ext[ExtKind] = ra.kind
	e.ctx.Extensions = ext
	return ext
}

// trueValue is the finalstateunknown extension's value, boxed once.
var trueValue any = strconv.FormatBool(true)

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
// event of a resource, parsed and boxed once per resource.
type resourceAttributes struct {
	// from is the resource as these were derived from it; a Resource that
	// was changed since (tests build them by hand) gets them derived anew.
	from informer.Resource

	source                    cetypes.URIRef
	cluster, apiVersion, kind any
	// invalid is what event validation finds wrong with these attributes,
	// the same error the setters and Validate gave.
	invalid error

	// boxed holds the changedby and changeop values boxed once: a resource
	// sees a handful of field managers and operations, and boxing each
	// event's copy would allocate twice per event. At most maxBoxed values
	// are kept, so a client that invents manager names cannot grow it.
	boxed  sync.Map // string → any
	nBoxed atomic.Int32
}

// maxBoxed bounds resourceAttributes.boxed.
const maxBoxed = 64

// box returns s as an interface value, boxed once per resource while
// fewer than maxBoxed values are kept.
func (ra *resourceAttributes) box(s string) any {
	if v, ok := ra.boxed.Load(s); ok {
		return v
	}
	var v any = s
	if ra.nBoxed.Load() < maxBoxed {
		if _, loaded := ra.boxed.LoadOrStore(s, v); !loaded {
			ra.nBoxed.Add(1)
		}
	}
	return v
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
	// SetSource records a parse error and leaves the source empty, and
	// Validate then reports the source as missing: check a context with
	// this source and otherwise valid attributes the same way.
	if u, err := url.Parse(r.Source); err == nil {
		ra.source = cetypes.URIRef{URL: *u}
	}
	ctx := event.EventContextV1{ID: "id", Type: TypeAdded, Source: ra.source}
	if err := ctx.Validate(); err != nil {
		ra.invalid = err
	}
	return ra
}
