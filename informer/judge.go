package informer

import (
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
)

// Judge applies a resource's shaping rules the way the listener does, for
// `kubewire verify`: which live objects the stream should carry, and
// whether a streamed object stands for a live one. With update suppression
// on, a stream may rightly hold an older resourceVersion whose content
// equals the live object's outside the ignored paths.
type Judge struct {
	s       *shaper
	payload string
	// Verifiable is false where keys are not objects (keyBy involvedObject):
	// one key then carries many Events and the last one wins.
	Verifiable bool
}

// NewJudge builds the judge of one configured resource.
func NewJudge(cfg config.Resource) (*Judge, error) {
	s, err := newShaper(cfg, cfg.Resource, slog.Default())
	if err != nil {
		return nil, err
	}
	return &Judge{s: s, payload: cfg.Payload, Verifiable: s.involved == ""}, nil
}

// Want transforms a live object as the informer would before caching it and
// reports whether the stream should hold it: snapshot records pass the
// filter with type synced, and a filter error keeps the object.
func (j *Judge) Want(u *unstructured.Unstructured) (map[string]any, bool) {
	obj := u.DeepCopy()
	if j.s.transform != nil {
		if _, err := j.s.transform(obj); err != nil {
			return nil, false
		}
	}
	if j.s.filter != nil {
		if match, err := j.s.filter.Match(string(OpSynced), obj.Object, nil); err == nil && !match {
			return nil, false
		}
	}
	return obj.Object, true
}

// Same reports whether a streamed object (its resourceVersion and event
// data) stands for the live one returned by Want.
func (j *Judge) Same(rv string, data []byte, live map[string]any) bool {
	if rv == (&unstructured.Unstructured{Object: live}).GetResourceVersion() {
		return true
	}
	if j.s.suppress == nil || j.payload == shape.PayloadReference {
		// Every change is emitted (or the data carries no content to
		// compare): only the same resourceVersion will do.
		return j.payload == shape.PayloadReference && j.s.suppress != nil
	}
	// apimachinery's json decodes integers as int64, as the informer's
	// objects hold them, so the comparison is like for like.
	var streamed map[string]any
	if j.payload == shape.PayloadDiff {
		var d struct {
			Object map[string]any `json:"object"`
		}
		if json.Unmarshal(data, &d) != nil {
			return false
		}
		streamed = d.Object
	} else if json.Unmarshal(data, &streamed) != nil {
		return false
	}
	_, same := j.s.suppress.Suppress(streamed, shape.Public(live))
	return same
}
