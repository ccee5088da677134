package consumer_test

import (
	"reflect"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

// synced is a snapshot record of configmaps/ns/<name> at rv in snapshot
// sid, with the id kubewire gives it.
func synced(name, rv, sid string) step {
	return obj(encoding.TypeSynced, name, rv, func(e *event.Event) {
		e.SetExtension(encoding.ExtSnapshotID, sid)
		e.SetID("uid-" + name + "/" + rv + "/synced/" + sid)
	})
}

// The streams below are what a restart (of kubewire, or of a source's
// reading) can deliver: docs/events.md, "What a consumer can see".
func TestAReplayedWindowAndAPrunedKeyFollowTheRule(t *testing.T) {
	const (
		add, upd, del      = encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeDeleted
		started, completed = encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted
	)
	firstWindow := []step{
		obj(add, "a", "1"), obj(add, "b", "2"),
		marker(started, "s1"), synced("a", "1", "s1"), synced("b", "2", "s1"), marker(completed, "s1"),
	}
	later := []step{obj(add, "c", "3"), obj(upd, "a", "4"), obj(del, "b", "5")}
	secondWindow := []step{marker(started, "s2"), synced("a", "4", "s2"), synced("c", "3", "s2"), marker(completed, "s2")}
	replay := []step{
		marker(started, "s1"), synced("a", "1", "s1"), synced("b", "2", "s1"), marker(completed, "s1"),
		obj(add, "c", "3"), obj(upd, "a", "4"), obj(del, "b", "5"),
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		steps []step
		held  []string
		calls []string
	}{{
		name:  "a window replayed after later changes and a later snapshot neither prunes nor brings back nor regresses anything",
		steps: cat(firstWindow, later, secondWindow, replay),
		held:  []string{"a@4", "c@3"},
		calls: []string{"add a 1", "add b 2", "add c 3", "update a 1->4", "delete b 5"},
	}, {
		name:  "a window replayed right after later changes prunes nothing",
		steps: cat(firstWindow, later, replay),
		held:  []string{"a@4", "c@3"},
		calls: []string{"add a 1", "add b 2", "add c 3", "update a 1->4", "delete b 5"},
	}, {
		name: "a started and completed marker replayed with nothing between them prune nothing",
		steps: []step{
			obj(add, "a", "1"), marker(started, "s1"), synced("a", "1", "s1"), marker(completed, "s1"),
			obj(add, "n", "2"), marker(started, "s1"), marker(completed, "s1"),
		},
		held:  []string{"a@1", "n@2"},
		calls: []string{"add a 1", "add n 2"},
	}, {
		name: "a started marker delivered twice keeps the window open from its first copy",
		steps: []step{
			obj(add, "a", "1"), marker(started, "s1"), obj(upd, "a", "2"), marker(started, "s1"), marker(completed, "s1"),
		},
		held:  []string{"a@2"},
		calls: []string{"add a 1", "update a 1->2"},
	}, {
		name: "a completed marker seen without its started marker still makes a later replay of its window harmless",
		steps: []step{
			marker(completed, "s0"), obj(add, "a", "1"),
			marker(started, "s0"), marker(completed, "s0"),
		},
		held:  []string{"a@1"},
		calls: []string{"add a 1"},
	}, {
		name: "a synced record of a snapshot newer than the prune brings the unchanged object back",
		steps: []step{
			obj(add, "a", "1"), marker(started, "s1"), marker(completed, "s1"),
			marker(started, "s2"), synced("a", "1", "s2"), marker(completed, "s2"),
		},
		held:  []string{"a@1"},
		calls: []string{"add a 1", "delete-unknown a 1", "add a 1"},
	}, {
		name: "a replayed live change of a pruned key does not bring it back",
		steps: []step{
			obj(add, "a", "1"), marker(started, "s1"), marker(completed, "s1"), obj(add, "a", "1"),
		},
		held:  []string{},
		calls: []string{"add a 1", "delete-unknown a 1"},
	}, {
		name: "a synced record of the window that pruned the key does not bring it back",
		steps: []step{
			obj(add, "a", "1"), marker(started, "s1"), marker(completed, "s1"), synced("a", "1", "s1"),
		},
		held:  []string{},
		calls: []string{"add a 1", "delete-unknown a 1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := run(tc.steps)
			if got := held(v); !reflect.DeepEqual(got, tc.held) {
				t.Errorf("the view holds %v, want %v (stats %+v)", got, tc.held, v.Stats())
			}
			if !reflect.DeepEqual(r.calls, tc.calls) {
				t.Errorf("handlers saw %q, want %q", r.calls, tc.calls)
			}
		})
	}
}

func TestADeleteOfAKeyTheViewDoesNotHoldIsReported(t *testing.T) {
	var problems, notHeld []consumer.Problem
	v := consumer.NewView(consumer.Options{
		OnProblem:       func(p consumer.Problem) { problems = append(problems, p) },
		OnDeleteNotHeld: func(p consumer.Problem) { notHeld = append(notHeld, p) },
	})
	r := &recorder{}
	v.AddEventHandler(r)
	for i, s := range []step{obj(encoding.TypeDeleted, "never", "3"), obj(encoding.TypeDeleted, "never", "3")} {
		v.Apply(consumer.Position{Partition: "p0", Offset: int64(i)}, s.ev)
	}
	// Handlers keep client-go's contract: no OnDelete for an object they
	// were never given.
	if len(r.calls) != 0 {
		t.Errorf("handlers saw %q, want nothing", r.calls)
	}
	if len(notHeld) != 1 || notHeld[0].Reason != consumer.ProblemNotHeld || notHeld[0].Key != "configmaps/ns/never" || notHeld[0].Position.Offset != 0 {
		t.Errorf("OnDeleteNotHeld got %+v: want one, for configmaps/ns/never at offset 0 (its copy is a duplicate)", notHeld)
	}
	// It is not a fault of the stream: `kubewire verify` reports every
	// OnProblem as an order violation.
	if len(problems) != 0 {
		t.Errorf("OnProblem got %+v, want nothing", problems)
	}
	if st := v.Stats(); st.DeletesNotHeld != 1 || st.Duplicates != 1 || st.Problems != 0 {
		t.Errorf("stats %+v: want 1 delete not held, 1 duplicate, no problem", st)
	}
}
