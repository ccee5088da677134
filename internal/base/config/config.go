// Package config defines kubewire's versioned configuration file: its typed
// schema, strict loading, defaulting and validation.
//
// A file is read with [Load] (or [Parse] for bytes). Loading is strict: unknown
// fields, values of the wrong type, duplicate keys and every semantic problem
// are collected and returned together as a single [*Error], so a user can fix
// a file in one pass. Callers can detect that case with errors.As and treat it
// as a usage error.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// APIVersion is the only apiVersion this package accepts.
const APIVersion = "kubewire.io/v1alpha1"

// Kind is the only kind this package accepts.
const Kind = "Config"

// Operations a resource can emit. A resource emits all four unless its
// operations list says otherwise.
const (
	OpAdded   = "added"
	OpUpdated = "updated"
	OpDeleted = "deleted"
	// OpSynced marks the events of a snapshot: the full current state of a
	// resource, sent once after the initial LIST and then every
	// snapshotInterval. Leaving it out disables snapshots.
	OpSynced = "synced"
)

// Operations lists every supported operation, in canonical order.
func Operations() []string {
	return []string{OpAdded, OpUpdated, OpDeleted, OpSynced}
}

// Config is the root of a kubewire configuration file.
type Config struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind must be Kind.
	Kind string `json:"kind"`
	// Cluster names the watched cluster. It is a DNS-1123 label because it
	// appears in CloudEvent sources and in NATS subjects.
	Cluster string `json:"cluster"`
	// Client tunes the Kubernetes API client.
	Client ClientConfig `json:"client"`
	// Dispatch tunes the per-sink event dispatcher.
	Dispatch DispatchConfig `json:"dispatch"`
	// Resources lists what to watch. There is one informer per resource.
	Resources []Resource `json:"resources"`
	// Sinks lists where events go.
	Sinks []Sink `json:"sinks"`
}

// ClientConfig tunes the Kubernetes API client's rate limiter.
type ClientConfig struct {
	// QPS is the sustained request rate to the API server. Default 50.
	QPS float32 `json:"qps"`
	// Burst is the short-term request allowance above QPS. Default 100
	// (or QPS rounded up, if that is larger); never below QPS.
	Burst int `json:"burst"`
}

// DispatchConfig tunes the dispatcher that sits in front of every sink.
type DispatchConfig struct {
	// Shards is the number of parallel lanes per sink. Default 16, range
	// 1..1024.
	Shards int `json:"shards"`
	// BufferEvents is the number of events each sink may hold in memory
	// before its overflow policy applies, split evenly between the
	// resources (lanes) the sink receives; it bounds what waits in memory,
	// not what the spool holds. Default DefaultBufferEvents.
	BufferEvents int `json:"bufferEvents"`
	// BufferBytes is the size of queued event data each sink may hold in
	// memory before its overflow policy applies, split like BufferEvents,
	// counted for resources on the raw cache (the default), whose size is
	// known without encoding. Default DefaultBufferBytes; 0 turns the byte
	// limit off.
	BufferBytes int64 `json:"bufferBytes"`
	// BatchSize is the largest number of events handed to a sink at once.
	// Default 100, range 1..10000.
	BatchSize int `json:"batchSize"`
	// DrainTimeout is how long shutdown waits for in-flight events.
	// Default 30s.
	DrainTimeout Duration `json:"drainTimeout"`
	// SpoolDir is where sinks with overflow: spool keep their disk spool,
	// one sub-directory per sink. Default DefaultSpoolDir; the chart mounts
	// a volume there.
	SpoolDir string `json:"spoolDir,omitempty"`
}

// Resource selects one Kubernetes resource to watch and where its events go.
type Resource struct {
	// Group is the API group; "" is the core group.
	Group string `json:"group"`
	// Version is the API version, e.g. "v1".
	Version string `json:"version"`
	// Resource is the lowercase plural resource name, e.g. "configmaps".
	Resource string `json:"resource"`
	// Namespaces restricts the watch to these namespaces. Empty means all
	// namespaces.
	Namespaces []string `json:"namespaces,omitempty"`
	// WatchPerNamespace, with several namespaces, runs one LIST/WATCH per
	// namespace instead of one cluster-wide watch filtered by kubewire, so
	// that a Role in each namespace is all the permission kubewire needs.
	// Unset means true for core Secrets (a ClusterRole would let kubewire
	// read every Secret in the cluster) and false otherwise. See
	// PerNamespaceWatch.
	WatchPerNamespace *bool `json:"watchPerNamespace,omitempty"`
	// LabelSelector filters objects server-side by label.
	LabelSelector string `json:"labelSelector,omitempty"`
	// FieldSelector filters objects server-side by field.
	FieldSelector string `json:"fieldSelector,omitempty"`
	// Operations lists the operations to emit. Default: all of Operations().
	Operations []string `json:"operations,omitempty"`
	// SnapshotInterval is how often to emit a full snapshot (synced events).
	// Zero disables periodic snapshots; the initial snapshot still happens
	// when synced is emitted. Default 30m.
	SnapshotInterval Duration `json:"snapshotInterval"`
	// KeepManagedFields keeps metadata.managedFields on cached objects.
	// Default false: they are stripped before caching.
	KeepManagedFields bool `json:"keepManagedFields,omitempty"`
	// Filter is a CEL expression over object, oldObject and type; only
	// events for which it yields true are emitted. See shape.go.
	Filter string `json:"filter,omitempty"`
	// Updates chooses which updates are emitted: "changed" (default: not
	// the no-op ones), "all" or "generationChanged".
	Updates string `json:"updates,omitempty"`
	// IgnorePaths lists fields whose changes alone do not make an update
	// worth emitting (with updates "changed").
	IgnorePaths []string `json:"ignorePaths,omitempty"`
	// Redact lists fields to digest or remove before objects are cached.
	Redact []RedactRule `json:"redact,omitempty"`
	// AllowSecretData turns off the default redaction of core/v1 Secrets.
	AllowSecretData bool `json:"allowSecretData,omitempty"`
	// Payload is what object events carry as data: "full" (default),
	// "reference" or "diff".
	Payload string `json:"payload,omitempty"`
	// KeyBy is the partition key of object events: "object" (default) or,
	// for Events, "involvedObject".
	KeyBy string `json:"keyBy,omitempty"`
	// Cache is how the informer holds objects: "raw" (the default: the
	// served JSON bytes; see cache.go) or "unstructured".
	Cache string `json:"cache,omitempty"`
	// Sinks names the sinks that receive this resource's events.
	Sinks []string `json:"sinks"`
	// Optional marks a resource the cluster may not serve (a CRD that is
	// not installed everywhere): while it is not served it is reported (a
	// log line and kubewire_informer_errors_total) but does not hold
	// readiness; once served it streams as usual.
	Optional bool `json:"optional,omitempty"`
	// Discover, when set, makes the entry select resources through the
	// cluster's discovery (discover.go) instead of naming one; group,
	// version and resource are then left out, and every other setting
	// applies to each resource it selects.
	Discover *Discover `json:"discover,omitempty"`
	// Discovered marks an entry that Expand made from a discover entry. Its
	// version is whatever its group prefers at the time, so Hash leaves the
	// version out.
	Discovered bool `json:"-"`
}

// GVR returns the resource's group, version and resource.
func (r Resource) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// Emits reports whether events of operation op are sent for this resource.
// A resource whose Operations is nil (not yet defaulted) emits everything.
func (r Resource) Emits(op string) bool {
	if r.Operations == nil {
		return slices.Contains(Operations(), op)
	}
	return slices.Contains(r.Operations, op)
}

// AllNamespaces reports whether the resource is watched in all namespaces.
func (r Resource) AllNamespaces() bool { return len(r.Namespaces) == 0 }

// PerNamespaceWatch reports whether each configured namespace gets its own
// LIST/WATCH, so that kubewire needs read access in those namespaces only.
// One namespace is always watched on its own; all namespaces never are.
func (r Resource) PerNamespaceWatch() bool {
	switch {
	case len(r.Namespaces) == 0:
		return false
	case len(r.Namespaces) == 1:
		return true
	case r.WatchPerNamespace != nil:
		return *r.WatchPerNamespace
	}
	return r.IsSecrets()
}

// Sink is one destination for events. Its type-specific block (the kafka
// block of a sink of type kafka, say) is written under the type's name and
// decoded by the sink type's own package (see SinkBlock); every sink has the
// common fields below.
type Sink struct {
	// Name identifies the sink; resources refer to it. A DNS-1123 label.
	Name string `json:"name"`
	// Type is one of the registered sink types (SinkTypes.Types).
	Type string `json:"type"`
	// Block is the decoded type-specific block; nil means every field at
	// its default. Load and Parse set it for every sink of a known type.
	Block SinkBlock `json:"-"`
	// Overflow is what happens when the sink's in-memory buffer is full:
	// "spool" (default) moves events, in order, to a FIFO on disk;
	// "conflate" folds queued changes of one object into its newest.
	Overflow string `json:"overflow,omitempty"`
	// Spool bounds and tunes the disk spool of overflow: spool.
	Spool SpoolConfig `json:"spool"`

	// blockMissing records that a required block was omitted (and
	// reported), so that validation does not also report its fields.
	blockMissing bool
}

// Overflow policies of a sink.
const (
	OverflowSpool    = "spool"
	OverflowConflate = "conflate"
)

// Fsync policies of a spool.
const (
	// FsyncAlways syncs every spooled event to disk before it counts as
	// spooled.
	FsyncAlways = "always"
	// FsyncInterval syncs at most once a second: a machine crash can lose
	// the last second of spooled events, a process crash loses none.
	FsyncInterval = "interval"
	// FsyncNever leaves syncing to the operating system.
	FsyncNever = "never"
)

// SpoolConfig bounds a sink's disk spool.
type SpoolConfig struct {
	// MaxBytes is the most disk the spool may use. Once it is full, new
	// changes are conflated in memory. Default 1 GiB.
	MaxBytes int64 `json:"maxBytes"`
	// Fsync is when spooled events are synced to disk: "always",
	// "interval" (default) or "never".
	Fsync string `json:"fsync,omitempty"`
}

// Sink returns the sink called name.
func (c *Config) Sink(name string) (*Sink, bool) {
	for i := range c.Sinks {
		if c.Sinks[i].Name == name {
			return &c.Sinks[i], true
		}
	}
	return nil, false
}

// Hash identifies what the resource's stream carries: every setting that
// decides which changes are emitted, how, and to which sinks. Settings that
// change only when or how kubewire works (snapshotInterval, cache,
// optional) are left out, and so is the version of a discovered resource:
// a group whose preferred version changes serves the same objects, under the
// same keys, so its checkpoint still holds. A checkpoint written under
// another hash is not resumed: changes the old settings left out would be
// missing.
func (r Resource) Hash() string {
	r.SnapshotInterval, r.Cache, r.Optional = Duration{}, "", false
	if r.Discovered {
		r.Version = ""
	}
	b, err := json.Marshal(r)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
