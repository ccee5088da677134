package consumer

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// Object is what a View holds for one key: the object's JSON and the few
// metadata fields the rule needs. The JSON is shared and must not be
// modified; Decode returns a copy to work on.
type Object struct {
	// Key is the event's partition key, e.g. "configmaps/shop/web".
	Key       string
	Namespace string
	Name      string
	UID       string
	// ResourceVersion is the object's, as the event's resourceversion
	// extension carries it.
	ResourceVersion string
	// JSON is the object: the event's data in payload mode full, its
	// "object" in payload mode diff, and a skeleton of apiVersion, kind and
	// metadata built from the data in payload mode reference.
	JSON []byte
	// Reference says the object is only a skeleton: the event was a
	// reference event or the resource's payload mode is reference, and
	// the content must be fetched from the API server when it is needed.
	Reference bool
}

// Decode returns the object as an Unstructured of its own.
func (o Object) Decode() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(o.JSON); err != nil {
		return nil, fmt.Errorf("consumer: decode %s: %w", o.Key, err)
	}
	return u, nil
}

// Labels reads the object's labels from its JSON.
func (o Object) Labels() labels.Set {
	r := gjson.GetBytes(o.JSON, "metadata.labels")
	if !r.IsObject() {
		return nil
	}
	set := labels.Set{}
	r.ForEach(func(k, v gjson.Result) bool {
		set[k.String()] = v.String()
		return true
	})
	return set
}

// entry is an Object as the View stores it, with what the rule needs.
type entry struct {
	Object
	// partition is where the key's events arrive; a snapshot marker of
	// another partition does not prune it.
	partition string
	// seq is the View's sequence number of the key's latest event, applied
	// or not: a snapshot window prunes the keys whose seq is older than its
	// started marker's.
	seq uint64
	// typ is the type of the event that set the object, to tell a
	// duplicate from another event of the same version.
	typ string
	// forgot is the seq of the watch.gap (its copy in partition) that made
	// the View forget the key's version, 0 if none did since an event set
	// the entry: the key's next change, or its record of a snapshot whose
	// window opened after the gap, is taken whatever its version, since
	// after an etcd restore objects come back older.
	forgot uint64
	// skipTomb, on an object held, names the partition whose next Kafka
	// tombstone of the key follows a delete the View did not apply (a
	// copy, or a late delete of an earlier object): that tombstone is not
	// applied either.
	skipTomb string
	// listed, on an object held, are the snapshots that listed it, at
	// its version, in another partition than the one that set it: their
	// windows in its own partition do not prune it. A snapshot leaves
	// the list when its window in the key's partition completes.
	listed []listing
	// sid is the snapshot whose synced record set the object, if one
	// did: a partition handed over says with it that it listed the key.
	sid string
}

// listing is a snapshot that listed a key in a partition.
type listing struct{ sid, partition string }

// objectJSON finds the object in an event's data, whatever the payload mode,
// and returns it with the capacity of its length, so that the View holds no
// more than the object. A reference becomes a skeleton object.
func objectJSON(data []byte, reference bool) ([]byte, bool, error) {
	if !gjson.ValidBytes(data) {
		return nil, false, fmt.Errorf("data is not JSON")
	}
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		return nil, false, fmt.Errorf("data is not a JSON object")
	}
	if !reference {
		if root.Get("metadata").IsObject() {
			return fitted(data), false, nil
		}
		if o := root.Get("object"); o.IsObject() {
			return bytes.Clone([]byte(o.Raw)), false, nil
		}
	}
	// A reference: apiVersion, kind, namespace, name, uid and
	// resourceVersion at the top, as the reference payload mode writes it.
	var ref shape.Reference
	if err := json.Unmarshal(data, &ref); err != nil || ref.UID == "" {
		return nil, false, fmt.Errorf("data is neither an object, a diff nor a reference")
	}
	skeleton := map[string]any{"apiVersion": ref.APIVersion, "kind": ref.Kind, "metadata": map[string]any{
		"name": ref.Name, "uid": ref.UID, "resourceVersion": ref.ResourceVersion,
	}}
	if ref.Namespace != "" {
		skeleton["metadata"].(map[string]any)["namespace"] = ref.Namespace
	}
	b, err := json.Marshal(skeleton)
	return b, true, err
}

// eventObject is objectJSON of an event's data. An object event without
// data (the contract always sends some) is held as a skeleton built from its
// extensions rather than dropped: a dropped key would be pruned as deleted.
func eventObject(ev *event.Event, reference bool) ([]byte, bool, error) {
	if len(ev.Data()) > 0 {
		return objectJSON(ev.Data(), reference)
	}
	ref, err := json.Marshal(map[string]string{
		"apiVersion": ext(ev, encoding.ExtAPIVersion), "kind": ext(ev, encoding.ExtKind),
		"namespace": ext(ev, encoding.ExtNamespace), "name": ext(ev, encoding.ExtName),
		"uid": ext(ev, encoding.ExtUID), "resourceVersion": ext(ev, encoding.ExtResourceVersion),
	})
	if err != nil {
		return nil, false, err
	}
	return objectJSON(ref, true)
}

// fitted returns b itself when it holds nothing beyond its length, else a
// copy: data decoded from a broker message often sits in a larger buffer.
func fitted(b []byte) []byte {
	if cap(b) == len(b) {
		return b
	}
	return bytes.Clone(b)
}
