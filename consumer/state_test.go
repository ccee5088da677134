package consumer_test

import (
	"bytes"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/consumer"
)

// applyAll applies evs to v in one partition, from offset from.
// applyAll reads records of a generated stream, each at its position, in
// one consumer (hand-overs and restarts left out).
func applyAll(v *consumer.View, ls []vline) {
	for _, l := range ls {
		if l.restart || l.Handover != "" {
			continue
		}
		pos := consumer.Position{Partition: l.Partition, Offset: *l.Offset}
		if l.ev == nil {
			v.Tombstone(pos, l.Tombstone)
			continue
		}
		v.Apply(pos, l.ev)
	}
}

func stateOf(t *testing.T, v *consumer.View) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := v.SaveState(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A View saved at any point of any stream of the property generator, loaded
// into a new View that reads on, ends exactly as the View that never
// stopped: not only its objects, but everything the rule remembers (deleted
// and pruned keys, open and applied snapshot windows, gaps, counters), as
// their saved bytes show.
func TestAViewLoadedFromItsSavedStateGoesOnAsIfItHadNeverStopped(t *testing.T) {
	r := rand.New(rand.NewPCG(propertySeed, 1))
	streams, splits := 300, 0
	for i := 0; i < streams; i++ {
		s, _, _ := genCase(r).stream()
		evs := linesOf(s)
		whole := consumer.NewView(consumer.Options{})
		applyAll(whole, evs)
		want := stateOf(t, whole)

		k := r.IntN(len(evs) + 1)
		first := consumer.NewView(consumer.Options{})
		applyAll(first, evs[:k])
		saved := stateOf(t, first)
		second := consumer.NewView(consumer.Options{})
		if err := second.LoadState(bytes.NewReader(saved)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if !bytes.Equal(stateOf(t, second), saved) {
			t.Fatalf("stream %d: the loaded state saves differently from the state it was loaded from", i)
		}
		if got, want := second.Position(), first.Position(); !maps.Equal(got, want) {
			t.Fatalf("stream %d: loaded position %v, want %v", i, got, want)
		}
		applyAll(second, evs[k:])
		if got := stateOf(t, second); !bytes.Equal(got, want) {
			t.Fatalf("stream %d split after %d of %d events: the resumed View differs from the one that never stopped:\nresumed:\n%s\nwhole:\n%s", i, k, len(evs), got, want)
		}
		splits++
	}
	t.Logf("seed %d: %d streams, each saved and loaded at a random event", propertySeed, splits)
}

func TestLoadStateRefusesAStateCutShortAndLeavesTheViewNew(t *testing.T) {
	v := consumer.NewView(consumer.Options{})
	s, _, _ := genCase(rand.New(rand.NewPCG(propertySeed, 2))).stream()
	applyAll(v, linesOf(s))
	saved := stateOf(t, v)
	if v.Len() == 0 {
		t.Fatal("the generated stream left nothing to save")
	}
	lines := strings.SplitAfter(string(saved), "\n")
	for _, cut := range []string{
		strings.Join(lines[:len(lines)-2], ""), // no trailer
		strings.Join(lines[:2], ""),            // header and one record
		string(saved[:len(saved)/2]),           // mid-line
	} {
		nv := consumer.NewView(consumer.Options{})
		err := nv.LoadState(strings.NewReader(cut))
		if err == nil {
			t.Fatalf("a state of %d of %d bytes loaded without error", len(cut), len(saved))
		}
		if nv.Len() != 0 || len(nv.Position()) != 0 {
			t.Fatalf("a refused state left %d objects and position %v", nv.Len(), nv.Position())
		}
		if err := nv.LoadState(bytes.NewReader(saved)); err != nil {
			t.Fatalf("after a refused state, the whole one does not load: %v", err)
		}
	}
	if err := v.LoadState(bytes.NewReader(saved)); !errors.Is(err, consumer.ErrStateInUse) {
		t.Fatalf("loading into a View that has read: %v, want ErrStateInUse", err)
	}
}

func TestAStateFileIsReplacedWholeAndHandlersGetItsObjectsAsInitialAdds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view.state")
	v := consumer.NewView(consumer.Options{})
	if err := v.LoadStateFile(path); err != nil {
		t.Fatalf("a missing state file: %v, want a new View", err)
	}
	s, _, _ := genCase(rand.New(rand.NewPCG(propertySeed, 3))).stream()
	evs := linesOf(s)
	applyAll(v, evs[:len(evs)/2])
	if err := v.SaveStateFile(path); err != nil {
		t.Fatal(err)
	}
	applyAll(v, evs[len(evs)/2:])
	if err := v.SaveStateFile(path); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(path + ".tmp-*"); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	nv := consumer.NewView(consumer.Options{})
	if err := nv.LoadStateFile(path); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateOf(t, nv), stateOf(t, v)) {
		t.Fatal("the state file does not hold the View's latest state")
	}
	adds := 0
	nv.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(_ any, initial bool) {
		if !initial {
			t.Error("a loaded object reached a handler as a new add")
		}
		adds++
	}})
	if adds != v.Len() {
		t.Fatalf("a handler added after loading got %d adds, the View holds %d", adds, v.Len())
	}
	if err := os.WriteFile(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := consumer.NewView(consumer.Options{}).LoadStateFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a state file of another format: %v, want an error naming the file", err)
	}
}
