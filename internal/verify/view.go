// Package verify applies kubewire's event stream the way docs/events.md tells
// a consumer to, and compares the resulting view with the cluster. The tests
// use it to prove convergence; `kubewire verify` will use it on a topic or
// stream.
package verify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
)

// Object is what the view knows of one key.
type Object struct {
	UID             string
	ResourceVersion string
	Type            string // the event type that last set it
	// Data is the event's data: the object (or reference, or diff) as the
	// consumer received it.
	Data []byte
}

// View is the state a consumer builds from one partition or stream.
type View struct {
	// objects maps a resource prefix ("configmaps", "widgets.example.com")
	// to its keys.
	objects map[string]map[string]Object
	// open maps a snapshot id to the keys touched since its started marker.
	open map[string]*window
	// Problems collects per-key order violations seen while applying: a
	// resourceVersion going backwards.
	Problems []string
	// Events counts the object events applied; Duplicates those whose id
	// had been applied before (a retry or redelivery).
	Events, Duplicates int
	seen               map[string]struct{}
	// Unmatched counts completed markers whose started marker was not seen,
	// which is normal on a compacted topic; their snapshot rule is skipped.
	Unmatched int
	// Incomplete counts completed markers that said some records of their
	// snapshot were not delivered; they prune nothing.
	Incomplete int
}

type window struct {
	resource string
	touched  map[string]bool
}

// NewView returns an empty view.
func NewView() *View {
	return &View{objects: map[string]map[string]Object{}, open: map[string]*window{}, seen: map[string]struct{}{}}
}

// resourceOf returns the resource prefix of a partition key.
func resourceOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

func extString(ev *event.Event, name string) string {
	v, _ := ev.Extensions()[name].(string)
	return v
}

// Apply applies one event by the consumer's rule.
func (v *View) Apply(ev *event.Event) {
	key := extString(ev, encoding.ExtPartitionKey)
	sid := extString(ev, encoding.ExtSnapshotID)
	switch ev.Type() {
	case encoding.TypeSnapshotStarted:
		v.open[sid] = &window{resource: key, touched: map[string]bool{}}
		return
	case encoding.TypeSnapshotCompleted:
		w, ok := v.open[sid]
		if !ok {
			v.Unmatched++
			return
		}
		delete(v.open, sid)
		if _, incomplete := ev.Extensions()[encoding.ExtIncomplete]; incomplete {
			// Some records were not delivered: a key without an event
			// since started may be one of them, and is live.
			v.Incomplete++
			return
		}
		for k := range v.objects[w.resource] {
			if !w.touched[k] {
				delete(v.objects[w.resource], k)
			}
		}
		return
	}
	v.Events++
	if _, dup := v.seen[ev.ID()]; dup {
		v.Duplicates++
	}
	v.seen[ev.ID()] = struct{}{}
	res := resourceOf(key)
	for _, w := range v.open {
		if w.resource == res {
			w.touched[key] = true
		}
	}
	m := v.objects[res]
	if m == nil {
		m = map[string]Object{}
		v.objects[res] = m
	}
	rv := extString(ev, encoding.ExtResourceVersion)
	if prev, ok := m[key]; ok && prev.UID == extString(ev, encoding.ExtUID) && olderRV(rv, prev.ResourceVersion) {
		v.Problems = append(v.Problems, fmt.Sprintf("%s: resourceVersion went back from %s to %s (%s)", key, prev.ResourceVersion, rv, ev.ID()))
	}
	switch ev.Type() {
	case encoding.TypeDeleted:
		delete(m, key)
	case encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeSynced:
		m[key] = Object{UID: extString(ev, encoding.ExtUID), ResourceVersion: rv, Type: ev.Type(), Data: ev.Data()}
	default:
		v.Problems = append(v.Problems, fmt.Sprintf("%s: unknown event type %s", key, ev.Type()))
	}
}

// olderRV compares resourceVersions as the decimal numbers etcd-backed
// servers use; anything else is not compared.
func olderRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// Delete applies a tombstone: a compacted Kafka topic may have dropped the
// deleted event and kept only the tombstone that followed it.
func (v *View) Delete(key string) {
	delete(v.objects[resourceOf(key)], key)
}

// Merge combines the views of several partitions of one topic: each key
// lives in exactly one partition, so the union is the whole state.
func Merge(vs ...*View) *View {
	out := NewView()
	for _, v := range vs {
		for res, m := range v.objects {
			if out.objects[res] == nil {
				out.objects[res] = map[string]Object{}
			}
			for k, o := range m {
				out.objects[res][k] = o
			}
		}
		out.Problems = append(out.Problems, v.Problems...)
		out.Unmatched += v.Unmatched
		out.Incomplete += v.Incomplete
		out.Events += v.Events
		out.Duplicates += v.Duplicates
	}
	return out
}

// Objects returns the keys of a resource and what the view holds for them.
func (v *View) Objects(resource string) map[string]Object {
	out := map[string]Object{}
	for k, o := range v.objects[resource] {
		out[k] = o
	}
	return out
}

// Truth is what the cluster holds for one key.
type Truth struct {
	ResourceVersion string
	// Same reports whether the consumer's object stands for the cluster's;
	// nil means the resourceVersions must be equal.
	Same func(Object) bool
}

// Diff compares the view of a resource with the cluster's truth (key →
// resourceVersion) and describes every difference, sorted; none means the
// consumer converged.
func (v *View) Diff(resource string, truth map[string]string) []string {
	t := make(map[string]Truth, len(truth))
	for k, rv := range truth {
		t[k] = Truth{ResourceVersion: rv}
	}
	return v.Compare(resource, t)
}

// Compare is Diff with a judgement per key of what counts as the same
// object.
func (v *View) Compare(resource string, truth map[string]Truth) []string {
	var diffs []string
	have := v.objects[resource]
	for k, t := range truth {
		o, ok := have[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s (rv %s)", k, t.ResourceVersion))
		case o.ResourceVersion == t.ResourceVersion:
		case t.Same == nil || !t.Same(o):
			diffs = append(diffs, fmt.Sprintf("stale %s: have rv %s, cluster has %s", k, o.ResourceVersion, t.ResourceVersion))
		}
	}
	for k := range have {
		if _, ok := truth[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %s: deleted in the cluster", k))
		}
	}
	sort.Strings(diffs)
	return diffs
}
