package shape

import "strings"

// KeyBy modes: what the partition key of an object event is.
const (
	// KeyByObject keys each object by itself (the default).
	KeyByObject = "object"
	// KeyByInvolvedObject keys a Kubernetes Event by the object it is about,
	// so all Events about one Pod share a partition and an order.
	KeyByInvolvedObject = "involvedObject"
)

// KeyByModes lists the keyBy modes.
func KeyByModes() []string { return []string{KeyByObject, KeyByInvolvedObject} }

// EventsResource reports whether group/resource is one of the two Event
// APIs keyBy involvedObject applies to, and which field names the object.
func EventsResource(group, resource string) (field string, ok bool) {
	switch {
	case group == "" && resource == "events":
		return "involvedObject", true
	case group == "events.k8s.io" && resource == "events":
		return "regarding", true
	}
	return "", false
}

// InvolvedKey returns "<kind>[.<group>]/<namespace>/<name>" (or without the
// namespace) for the object an Event is about, read from field; false if the
// Event names no object. Kind and group, not the resource, because that is
// what an Event records.
func InvolvedKey(obj map[string]any, field string) (string, bool) {
	ref, _ := obj[field].(map[string]any)
	return ReferenceKey(ref)
}

// ReferenceKey is InvolvedKey for the object reference itself (the value of
// an Event's involvedObject or regarding), for a caller that reads it
// without decoding the whole Event.
func ReferenceKey(ref map[string]any) (string, bool) {
	kind, _ := ref["kind"].(string)
	name, _ := ref["name"].(string)
	if kind == "" || name == "" {
		return "", false
	}
	ns, _ := ref["namespace"].(string)
	av, _ := ref["apiVersion"].(string)
	var b strings.Builder
	b.WriteString(kind)
	if g, _, ok := strings.Cut(av, "/"); ok && g != "" {
		b.WriteByte('.')
		b.WriteString(g)
	}
	b.WriteByte('/')
	if ns != "" {
		b.WriteString(ns)
		b.WriteByte('/')
	}
	b.WriteString(name)
	return b.String(), true
}
