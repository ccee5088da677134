package encoding

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/informer/raw"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// eventWithSetters is New as it was written when it built sdk-go's
// event.Event: every attribute through its setter, then Validate. It is
// the oracle that New builds the same events and rejects the same ones.
func eventWithSetters(c *informer.Change) (*event.Event, error) {
	typ, ok := types[c.Op]
	if !ok {
		return nil, fmt.Errorf("encoding: unknown change op %q", c.Op)
	}
	r := c.Resource
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetType(typ)
	ev.SetSource(r.Source)
	ev.SetTime(c.Observed)
	ev.SetExtension(ExtPartitionKey, c.Key)
	ev.SetExtension(ExtCluster, r.Cluster)
	ev.SetExtension(ExtAPIVersion, r.APIVersion())
	ev.SetExtension(ExtKind, r.Kind)
	var data []byte
	var err error
	if c.Op == informer.OpGap {
		if c.Gap == nil {
			return nil, fmt.Errorf("encoding: gap change for %s has no gap", c.Key)
		}
		id := r.KeyPrefix
		if c.Gap.Namespace != "" {
			id += "/" + c.Gap.Namespace
			ev.SetExtension(ExtNamespace, c.Gap.Namespace)
		}
		ev.SetID(id + "/gap/" + c.Gap.From + "-" + c.Gap.To)
		// The contract's field order: group, version, resource,
		// namespace (only when set), from, to, reason.
		d := struct {
			Group     string `json:"group"`
			Version   string `json:"version"`
			Resource  string `json:"resource"`
			Namespace string `json:"namespace,omitempty"`
			From      string `json:"from"`
			To        string `json:"to"`
			Reason    string `json:"reason"`
		}{r.GVR.Group, r.GVR.Version, r.GVR.Resource, c.Gap.Namespace, c.Gap.From, c.Gap.To, c.Gap.Reason}
		data, err = json.Marshal(d)
	} else if c.IsMarker() {
		ev.SetID(c.SnapshotID + "/" + string(c.Op))
		ev.SetExtension(ExtSnapshotID, c.SnapshotID)
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
		id := uid + "/" + rv + "/" + string(c.Op)
		if c.SnapshotID != "" {
			id += "/" + c.SnapshotID
			ev.SetExtension(ExtSnapshotID, c.SnapshotID)
		}
		ev.SetID(id)
		if ns == "" {
			ev.SetSubject(name)
		} else {
			ev.SetSubject(ns + "/" + name)
			ev.SetExtension(ExtNamespace, ns)
		}
		ev.SetExtension(ExtName, name)
		ev.SetExtension(ExtUID, uid)
		ev.SetExtension(ExtResourceVersion, rv)
		if c.FinalStateUnknown {
			ev.SetExtension(ExtFinalStateUnknown, strconv.FormatBool(true))
		}
		if c.Op != informer.OpDeleted {
			cb, ok := o.ChangedBy()
			if ok {
				for _, x := range [][2]string{{ExtChangedBy, cb.Manager}, {ExtChangeOp, cb.Operation}, {ExtChangeTime, cb.Time}} {
					if x[1] != "" {
						ev.SetExtension(x[0], x[1])
					}
				}
			}
		}
		data, err = objectData(c)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding: marshal data of %s: %w", c.Key, err)
	}
	ev.SetDataContentType(event.ApplicationJSON)
	ev.DataEncoded = data
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encoding: event for %s is invalid: %w", c.Key, err)
	}
	return &ev, nil
}

// setterCases are changes of every kind the encoder meets, on both cache
// paths, including the odd ones: no namespace, no name, no provenance, a
// provenance with empty fields, whitespace where the setters trim, and
// resources whose source the setters reject.
func setterCases(t *testing.T) []*informer.Change {
	pods := informer.NewResource("prod", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true)
	nodes := informer.NewResource("prod", schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)
	widgets := informer.NewResource("prod", schema.GroupVersionResource{Group: "bench.kubewire.io", Version: "v1", Resource: "widgets"}, "Widget", true)
	badSource := informer.NewResource("a\x7fb", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true)
	noSource := &informer.Resource{Cluster: "c", GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", KeyPrefix: "pods"}
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

	objects := [][]byte{
		benchdata.Pods.JSON(benchdata.DefaultSeed, 0, 5),
		benchdata.ReferencePod(),
		[]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"u","resourceVersion":"3"}}`),
		[]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"namespace":"ns","uid":"u","resourceVersion":"3","managedFields":[{"manager":"","operation":"Update","time":"2024-01-02T03:04:05Z"}]}}`),
		[]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":" spaced ","namespace":" ns ","uid":" u ","resourceVersion":"3"}}`),
		[]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{}}`),
	}
	var cs []*informer.Change
	for _, res := range []*informer.Resource{pods, nodes, widgets, badSource, noSource} {
		for _, op := range []informer.Op{informer.OpAdded, informer.OpUpdated, informer.OpDeleted, informer.OpSynced} {
			for _, b := range objects {
				ro, err := raw.New(b, raw.BuildOptions{})
				if err != nil {
					t.Fatal(err)
				}
				u := benchdata.Decode(b)
				for i, c := range []*informer.Change{
					{Op: op, Resource: res, Key: res.ObjectKey(ro.GetNamespace(), ro.GetName()), Object: informer.FromRaw(ro), Observed: at},
					{Op: op, Resource: res, Key: res.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: at},
				} {
					switch i {
					case 0:
						c.FinalStateUnknown = op == informer.OpDeleted
					case 1:
						c.Key = "involved/" + c.Key // a keyBy that does not end in the subject
						c.Observed = time.Time{}
					}
					if op == informer.OpSynced {
						c.SnapshotID = "snap"
					}
					cs = append(cs, c)
				}
			}
		}
		cs = append(cs,
			&informer.Change{Op: informer.OpSnapshotStarted, Resource: res, Key: res.KeyPrefix, SnapshotID: "s1", Observed: at},
			&informer.Change{Op: informer.OpSnapshotCompleted, Resource: res, Key: res.KeyPrefix, SnapshotID: " s2 ", Count: 3, Observed: at},
			&informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix, Observed: at,
				Gap: &informer.Gap{From: "100", To: "250", Reason: informer.GapExpired}},
			&informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix, Observed: at,
				Gap: &informer.Gap{Namespace: "team-a", From: "", To: " 7 ", Reason: informer.GapConfigChanged}},
			&informer.Change{Op: informer.OpGap, Resource: res, Key: res.KeyPrefix},
			&informer.Change{Op: "renamed", Resource: res, Key: res.KeyPrefix},
			&informer.Change{Op: informer.OpAdded, Resource: res, Key: res.KeyPrefix},
		)
	}
	return cs
}

func TestEventIsWhatTheSettersBuild(t *testing.T) {
	invalid := 0
	for i, c := range setterCases(t) {
		got, gotErr := New(c)
		want, wantErr := eventWithSetters(c)
		if wantErr != nil && strings.Contains(wantErr.Error(), "is invalid") {
			invalid++
		}
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("case %d (%s %s): error %v, the setters give %v", i, c.Op, c.Key, gotErr, wantErr)
			continue
		}
		if gotErr != nil {
			continue
		}
		if ce := got.CloudEvent(); !reflect.DeepEqual(ce, want) {
			t.Errorf("case %d (%s %s):\n got %s\nwant %s", i, c.Op, c.Key, ce, want)
		}
	}
	if invalid == 0 {
		t.Error("no case had a source the setters reject")
	}
}

// TestEventAttributesFollowAResourceChangedAfterUse covers the cache of
// per-resource attributes: a Resource edited after its first event (tests
// build them by hand) gets events with the new values.
func TestEventAttributesFollowAResourceChangedAfterUse(t *testing.T) {
	r := informer.NewResource("one", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)
	c := &informer.Change{Op: informer.OpSnapshotStarted, Resource: r, Key: r.KeyPrefix, SnapshotID: "s"}
	if ev, err := New(c); err != nil || ev.Extensions()[ExtCluster] != "one" {
		t.Fatalf("first event: %v %v", ev, err)
	}
	*r = *informer.NewResource("two", schema.GroupVersionResource{Group: "g", Version: "v2", Resource: "things"}, "Thing", true)
	ev, err := New(c)
	if err != nil || ev.Extensions()[ExtCluster] != "two" || ev.Extensions()[ExtAPIVersion] != "g/v2" ||
		ev.Extensions()[ExtKind] != "Thing" || ev.Source() != "/clusters/two/apis/g/v2/things" {
		t.Fatalf("after the change: %v %v", ev, err)
	}
}
