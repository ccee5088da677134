package app

import (
	"reflect"
	"testing"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/checkpoint"
)

func TestAResourceResumesFromTheNewerOfItsCheckpointAndItsSpoolPositionUnderItsOwnConfig(t *testing.T) {
	cp := checkpoint.Entry{Hash: "h", Streams: map[string]string{"a": "100", "b": "300"}}
	pos := checkpoint.Entry{Hash: "h", Streams: map[string]string{"a": "250", "b": "200"}}
	for _, tc := range []struct {
		name    string
		uid     string
		cp, pos checkpoint.Entry
		want    *informer.Resume
	}{
		{"nothing saved", "", checkpoint.Entry{}, checkpoint.Entry{}, nil},
		{"both, per stream the newer", "", cp, pos, &informer.Resume{Streams: map[string]string{"a": "250", "b": "300"}}},
		{"the spool's position under another config is not used", "", cp, checkpoint.Entry{Hash: "old", Streams: pos.Streams}, &informer.Resume{Streams: cp.Streams}},
		{"a checkpoint under another config is a declared gap", "", checkpoint.Entry{Hash: "old", Streams: cp.Streams}, checkpoint.Entry{},
			&informer.Resume{Streams: cp.Streams, Reason: informer.GapConfigChanged}},
		{"only the spool's position", "", checkpoint.Entry{}, pos, &informer.Resume{Streams: pos.Streams}},
		{"a CRD created again under the same name starts afresh: no resume, no gap", "new-uid",
			checkpoint.Entry{Hash: "h", Streams: cp.Streams, UID: "old-uid"}, checkpoint.Entry{Hash: "h", Streams: pos.Streams, UID: "old-uid"}, nil},
		{"the same CRD resumes", "uid", checkpoint.Entry{Hash: "h", Streams: cp.Streams, UID: "uid"}, checkpoint.Entry{}, &informer.Resume{Streams: cp.Streams}},
	} {
		if got := resumeOf("h", tc.uid, tc.cp, tc.pos); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
