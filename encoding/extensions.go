package encoding

import (
	"strings"

	"github.com/kubewire/kubewire/internal/base/shape"
)

// The extension attributes of the event contract (docs/events.md), every
// one kubewire sets, wherever it sets it. CloudEvents limits their names to
// lowercase alphanumerics; every value is a string, because sdk-go rejects
// int64.
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
	// ExtIncomplete is set on a snapshot.completed marker when some records
	// of the snapshot could not be delivered; its value is how many.
	// Consumers must not prune on such a marker.
	ExtIncomplete = "incomplete"
	// ExtSnapshotRV is set on snapshot markers: the resourceVersion of the
	// snapshot's list, the highest version kubewire had handled when it
	// enqueued the marker (informer.Change.SnapshotRV). The state a
	// snapshot window leaves is the cluster's at its completed marker's
	// version or later, which is what `kubewire history --at rv:N` needs.
	ExtSnapshotRV = "snapshotrv"
	// ExtConflated is set on an event that stands for several changes of
	// its object folded together while the buffer was full; its value is
	// how many earlier changes were folded in. The dispatcher sets it.
	ExtConflated = "conflated"
	// ExtConflatedFrom goes with ExtConflated: the resourceVersion of the
	// oldest change folded into the event. Changes of the object from that
	// version up to the event's own resourceversion were not sent, the
	// first of them included.
	ExtConflatedFrom = "conflatedfrom"
	// ExtPayload marks an event whose data is a reference to the object
	// instead of the object itself, because the full event was larger than
	// the broker accepts. Its value is PayloadReference, and the data has
	// the shape of that payload mode (see ReferenceEvent).
	ExtPayload = "payload"
)

// Extensions that say who made a change: the newest entry of the object's
// managedFields when kubewire saw it (docs/events.md).
const (
	ExtChangedBy  = "changedby"
	ExtChangeOp   = "changeop"
	ExtChangeTime = "changetime"
)

// PayloadReference is the value of ExtPayload.
const PayloadReference = shape.PayloadReference

// Extensions lists every extension name above, for code that prepares
// something per name once (binding header names) instead of per event.
var Extensions = []string{
	ExtPartitionKey, ExtAPIVersion, ExtKind, ExtNamespace, ExtName, ExtUID, ExtResourceVersion,
	ExtCluster, ExtSnapshotID, ExtSnapshotRV, ExtFinalStateUnknown, ExtIncomplete, ExtConflated, ExtConflatedFrom, ExtPayload,
	ExtChangedBy, ExtChangeOp, ExtChangeTime,
}

// HeaderNames are a binding's binary-mode header names: the binding's
// prefix and an attribute's name, made once rather than per event, for the
// spec's attributes and for every name in Extensions.
type HeaderNames struct {
	// SpecVersion, ID, Source, Type, Subject, Time and DataSchema are the
	// headers of the spec's attributes. datacontenttype has none: every
	// binding carries it in its own content-type header.
	SpecVersion, ID, Source, Type, Subject, Time, DataSchema string

	prefix string
	known  map[string]string
}

// NewHeaderNames prepares the header names of prefix ("ce_" for Kafka,
// "ce-" for NATS and HTTP).
func NewHeaderNames(prefix string) *HeaderNames {
	h := &HeaderNames{
		SpecVersion: prefix + "specversion",
		ID:          prefix + "id",
		Source:      prefix + "source",
		Type:        prefix + "type",
		Subject:     prefix + "subject",
		Time:        prefix + "time",
		DataSchema:  prefix + "dataschema",
		prefix:      prefix,
		known:       make(map[string]string, len(Extensions)),
	}
	for _, name := range Extensions {
		h.known[name] = prefix + name
	}
	return h
}

// Extension is the header of extension name. CloudEvents extension names
// are lowercase; sdk-go lowercases them when they are set.
func (h *HeaderNames) Extension(name string) string {
	if s, ok := h.known[name]; ok {
		return s
	}
	return h.prefix + strings.ToLower(name)
}
