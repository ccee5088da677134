// Package verify applies kubewire's event stream the way docs/events.md tells
// a consumer to, and compares the resulting view with the cluster. The tests
// use it to prove convergence; `kubewire verify` uses it on a topic or
// stream. The rule itself is the public consumer package's: this package
// only counts what it saw and compares.
package verify

import (
	"fmt"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// Object is what the view knows of one key.
type Object struct {
	UID             string
	ResourceVersion string
	// Data is the object as the consumer holds it: the object in payload
	// mode full, the diff's object in payload mode diff, and a skeleton of
	// the identity for references.
	Data []byte
}

// View is the state a consumer builds from one partition or stream.
type View struct {
	// parts are the consumer views of the partitions merged into this one;
	// a view that was not merged has one, and Apply feeds it.
	parts []*consumer.View
	// next is, per partition, the position of its next record, for
	// Apply and Delete and the ...In methods.
	next map[string]int64
	// Problems collects per-key order violations seen while applying: a
	// resourceVersion going backwards (the event is not applied), and
	// events that break the contract.
	Problems []string
	// Events counts the object events applied; Duplicates those whose id
	// had been applied before (a retry or redelivery).
	Events, Duplicates int
	// Unmatched counts completed markers whose started marker was not seen,
	// which is normal on a compacted topic; their snapshot rule is skipped.
	Unmatched int
	// Incomplete counts completed markers that said some records of their
	// snapshot were not delivered; they prune nothing.
	Incomplete int
	// Replays counts events older than what the view holds whose id had
	// been applied before: after a restart kubewire resumes from its
	// checkpoint and a suffix of a key's history comes again. The rule
	// drops them; they are not order violations, which are older events
	// never seen before.
	Replays int

	// ids are the ids applied so far, and replaying says the event being
	// applied has one of them.
	ids       map[string]struct{}
	replaying bool
	// Gaps lists the gaps kubewire declared (watch.gap events), each once
	// however many partitions carried it, sorted.
	Gaps []Gap
}

// Gap is one watch.gap event: changes of Resource (in Namespace, if set)
// with a resourceVersion in (From, To] may be missing from the stream. The
// snapshot that follows it repairs the view, so a gap is not a divergence;
// it says what an audit of the stream cannot account for.
type Gap struct {
	ID                  string
	Resource, Namespace string
	From, To, Reason    string
}

// String describes the gap for verify's output.
func (g Gap) String() string {
	where := g.Resource
	if g.Namespace != "" {
		where += " in namespace " + g.Namespace
	}
	return fmt.Sprintf("%s: changes with resourceVersion in (%s, %s] may be missing (%s)", where, g.From, g.To, g.Reason)
}

// NewView returns an empty view.
func NewView() *View {
	v := &View{}
	v.parts = []*consumer.View{consumer.NewView(consumer.Options{OnProblem: v.problem, OnWatchGap: v.gap})}
	return v
}

func (v *View) gap(g consumer.WatchGap) {
	v.Gaps = append(v.Gaps, Gap{ID: g.ID, Resource: g.Key, Namespace: g.Namespace, From: g.From, To: g.To, Reason: g.Reason})
}

func (v *View) problem(p consumer.Problem) {
	switch p.Reason {
	case consumer.ProblemStale:
		if v.replaying {
			v.Replays++
			return
		}
		v.Problems = append(v.Problems, fmt.Sprintf("%s: %s (%s)", p.Key, p.Detail, p.ID))
	case consumer.ProblemUnmatched:
		// Counted in Unmatched: normal at the start of a compacted topic,
		// and no order violation.
		return
	case consumer.ProblemUnknownType:
		v.Problems = append(v.Problems, fmt.Sprintf("%s: unknown event type %s", p.Key, p.Detail))
	default:
		v.Problems = append(v.Problems, fmt.Sprintf("%s: %s: %s (%s)", p.Key, p.Reason, p.Detail, p.ID))
	}
}

// Apply applies one event by the consumer's rule, as the next record of a
// view of one partition.
func (v *View) Apply(ev *event.Event) { v.ApplyAt(v.position(""), ev) }

// ApplyIn applies one event read from partition, as its next record. The
// rule is applied across the partitions of a topic: after the topic grew,
// a key's events are in two of them.
func (v *View) ApplyIn(partition string, ev *event.Event) { v.ApplyAt(v.position(partition), ev) }

// ApplyAt applies one event read at pos.
func (v *View) ApplyAt(pos consumer.Position, ev *event.Event) {
	if t := ev.Type(); t != encoding.TypeSnapshotStarted && t != encoding.TypeSnapshotCompleted && t != encoding.TypeGap && t != encoding.TypeRemoved {
		v.Events++
	}
	if v.ids == nil {
		v.ids = map[string]struct{}{}
	}
	if id := ev.ID(); id != "" {
		_, v.replaying = v.ids[id]
		v.ids[id] = struct{}{}
	}
	v.parts[0].Apply(pos, ev)
	v.replaying = false
	v.count()
}

// Delete applies a tombstone: a compacted Kafka topic may have dropped the
// deleted event and kept only the tombstone that followed it.
func (v *View) Delete(key string) { v.DeleteAt(v.position(""), key) }

// DeleteIn applies a tombstone read from partition, as its next record.
func (v *View) DeleteIn(partition, key string) { v.DeleteAt(v.position(partition), key) }

// DeleteAt applies a tombstone read at pos.
func (v *View) DeleteAt(pos consumer.Position, key string) {
	v.parts[0].Tombstone(pos, key)
}

func (v *View) position(partition string) consumer.Position {
	if v.next == nil {
		v.next = map[string]int64{}
	}
	o := v.next[partition]
	v.next[partition]++
	return consumer.Position{Partition: partition, Offset: o}
}

func (v *View) count() {
	st := v.parts[0].Stats()
	v.Duplicates, v.Unmatched, v.Incomplete = int(st.Duplicates), int(st.Unmatched), int(st.Incomplete)
}

// Merge combines the views of several partitions of one topic whose keys
// never moved (a topic that did not grow): each key lives in exactly one
// partition, so the union is the whole state. A topic that grew is read
// into one View, with ApplyIn. A gap
// goes to every partition, and is listed once. The merged view is for
// reading; apply to the partitions' views.
func Merge(vs ...*View) *View {
	out := &View{}
	seen := map[string]bool{}
	for _, v := range vs {
		for _, g := range v.Gaps {
			if !seen[g.ID] {
				seen[g.ID] = true
				out.Gaps = append(out.Gaps, g)
			}
		}
		out.parts = append(out.parts, v.parts...)
		out.Problems = append(out.Problems, v.Problems...)
		out.Unmatched += v.Unmatched
		out.Incomplete += v.Incomplete
		out.Events += v.Events
		out.Duplicates += v.Duplicates
		out.Replays += v.Replays
	}
	sort.Slice(out.Gaps, func(i, j int) bool {
		a, b := out.Gaps[i], out.Gaps[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.ID < b.ID
	})
	return out
}

// Objects returns the keys of a resource and what the view holds for them.
func (v *View) Objects(resource string) map[string]Object {
	out := map[string]Object{}
	for _, p := range v.parts {
		for _, o := range p.Objects(resource) {
			out[o.Key] = Object{UID: o.UID, ResourceVersion: o.ResourceVersion, Data: o.JSON}
		}
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
	have := v.Objects(resource)
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
