package shape

import (
	"time"
)

// PrivateKey is the top-level key under which the transform keeps the
// provenance of an object after stripping its managedFields.
//
// Why a key in the object: the informer caches plain Unstructured objects,
// so there is nowhere beside the object to keep a side struct that would
// travel with it into the cache, through DeletedFinalStateUnknown and into
// snapshots. Re-deriving later is impossible because managedFields are gone
// by then. Kubernetes field names are camelCase identifiers, so a key
// starting with '@' cannot collide with a real field. The value is plain JSON
// (a map of strings) so that DeepCopy of the object keeps working. Everything
// that exposes an object (the event data, CEL filters, diffs, the update
// comparison) goes through Public, which leaves the key out.
const PrivateKey = "@kubewire.changedBy"

// ChangedBy is the most recent entry of an object's managedFields: which
// field manager last wrote it, with which operation, and when.
type ChangedBy struct {
	Manager   string
	Operation string
	Time      string // RFC 3339, second precision as the API server records it
}

// recordChangedBy stores the newest managedFields entry of obj under
// PrivateKey. It is a no-op when obj has no managedFields, which also makes
// the transform safe to run twice.
func recordChangedBy(obj map[string]any) {
	md, _ := obj["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	if cb, ok := newest(entries); ok {
		obj[PrivateKey] = map[string]any{"manager": cb.Manager, "operation": cb.Operation, "time": cb.Time}
	}
}

// newest picks the entry with the latest time. The API server records times
// to the second, so two writes within one second tie; the later entry in the
// list wins then, which is a guess, and documented as one.
func newest(entries []any) (ChangedBy, bool) {
	var best ChangedBy
	var bestT time.Time
	found := false
	for _, e := range entries {
		m, _ := e.(map[string]any)
		ts, _ := m["time"].(string)
		t, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			continue
		}
		if !found || !t.Before(bestT) {
			mgr, _ := m["manager"].(string)
			op, _ := m["operation"].(string)
			best, bestT, found = ChangedBy{Manager: mgr, Operation: op, Time: ts}, t, true
		}
	}
	return best, found
}

// ChangedByOf returns the provenance of obj: the one the transform recorded,
// or, for resources that keep their managedFields, the newest entry.
func ChangedByOf(obj map[string]any) (ChangedBy, bool) {
	if m, ok := obj[PrivateKey].(map[string]any); ok {
		mgr, _ := m["manager"].(string)
		op, _ := m["operation"].(string)
		ts, _ := m["time"].(string)
		return ChangedBy{Manager: mgr, Operation: op, Time: ts}, true
	}
	md, _ := obj["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	return newest(entries)
}

// Public returns obj without kubewire's private key. It copies only the top
// level, and only when the key is there.
func Public(obj map[string]any) map[string]any {
	if _, ok := obj[PrivateKey]; !ok {
		return obj
	}
	out := make(map[string]any, len(obj)-1)
	for k, v := range obj {
		if k != PrivateKey {
			out[k] = v
		}
	}
	return out
}
