package informer

import (
	"runtime"
	"strconv"
	"testing"
	"unsafe"
)

func TestTheCheckpointMovesOnlyOverAContiguousPrefixOfDoneChanges(t *testing.T) {
	p := newProgress("10")
	defer p.close()
	a := p.add("11", 2) // two sinks
	b := p.add("12", 1)
	p.add("", 0) // filtered: done at once, holds nothing
	c := p.add("14", 1)

	check := func(want string) {
		t.Helper()
		if got, _ := p.checkpoint(); got != want {
			t.Fatalf("checkpoint %s, want %s", got, want)
		}
	}
	c.Done()
	b.Done()
	check("10") // a is held back by one of its two sinks
	a.Done()
	check("10")
	a.Done()
	check("14")
	if n := p.pending(); n != 0 {
		t.Fatalf("%d entries pending after every change is done", n)
	}
	p.add("15", 0)
	check("15")
}

func TestAMarkSurvivesASpoolAsItsToken(t *testing.T) {
	p := newProgress("")
	m := p.add("7", 1)
	stream, seq := m.Token()
	if s2, q2 := MarkOf(stream, seq).Token(); s2 != stream || q2 != seq {
		t.Fatal("the token did not lead back to its Mark")
	}
	MarkOf(stream, seq).Done()
	if got, _ := p.checkpoint(); got != "7" {
		t.Fatalf("checkpoint %q after the Mark read back was done, want 7", got)
	}
	p.close()
	if MarkOf(stream, seq) != (Mark{}) {
		t.Fatal("a closed stream's token still finds a Mark")
	}
	if MarkOf(stream+1000, 1) != (Mark{}) {
		t.Fatal("a token of no stream of this process found a Mark")
	}
}

func TestTheSpoolPositionCountsASpooledChangeAndTheCheckpointDoesNot(t *testing.T) {
	p := newProgress("10")
	defer p.close()
	a := p.add("11", 2) // two sinks: one spools it, one acknowledges it
	b := p.add("12", 1)
	c := p.add("13", 1)
	a.Done()
	a.Spooled()
	b.Spooled()
	c.Spooled()
	check := func(cp, pos string) {
		t.Helper()
		if got, _ := p.checkpoint(); got != cp || p.spoolPosition() != pos {
			t.Fatalf("checkpoint %s, spool position %s; want %s and %s", got, p.spoolPosition(), cp, pos)
		}
	}
	check("10", "13")
	// The spool hands b back: until it is acknowledged it is on no disk,
	// and the position stays before it.
	as, _ := a.Token()
	_, bseq := b.Token()
	_, aseq := a.Token()
	back := MarkOf(as, bseq)
	check("10", "11")
	MarkOf(as, aseq).Done()
	check("11", "11")
	back.Done()
	check("12", "13")
}

func BenchmarkProgressAddDone(b *testing.B) {
	p := newProgress("")
	defer p.close()
	b.ReportAllocs()
	var pending [64]Mark
	for i := 0; b.Loop(); i++ {
		// Out of order within a window, as shards acknowledge.
		j := i % len(pending)
		pending[j].Done()
		pending[j] = p.add("1", 1)
	}
}

func TestAHeldCheckpointStaysAtWhatWasAcknowledgedUntilReleased(t *testing.T) {
	p := newProgress("20") // resumed from the spool's position
	defer p.close()
	p.hold("10") // what every sink had acknowledged
	p.add("21", 1).Done()
	if cp, _ := p.checkpoint(); cp != "10" {
		t.Fatalf("checkpoint %s while held, want 10", cp)
	}
	p.release()
	if cp, _ := p.checkpoint(); cp != "21" {
		t.Fatalf("checkpoint %s after the release, want 21", cp)
	}
}

// A raw object's resourceVersion is a view into the object's JSON, so a
// pending entry that kept it would keep the whole object until every sink
// acknowledged the change: during a broker outage, every version written
// to the spool stayed in memory as well (issue 46: RSS rose by the churn's
// bytes, 2 MB/s, for as long as the outage lasted).
func TestAPendingChangeKeepsItsVersionButNotTheObjectItCameFrom(t *testing.T) {
	p := newProgress("10")
	defer p.close()
	const n, size = 100, 64 << 10
	before := liveHeap()
	for i := range n {
		obj := make([]byte, size)
		rv := strconv.Itoa(11 + i)
		copy(obj, rv)
		p.add(unsafe.String(&obj[0], len(rv)), 1)
	}
	if per := (int64(liveHeap()) - int64(before)) / n; per > 1<<10 {
		t.Errorf("each pending change keeps %d bytes", per)
	}
	if got, _ := p.checkpoint(); got != "10" {
		t.Fatalf("checkpoint %s with every change pending", got)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestBookmarksMoveTheCheckpointButNotWhereItSettled(t *testing.T) {
	p := newProgress("10")
	defer p.close()
	check := func(mark, settled string) {
		t.Helper()
		if got, _ := p.checkpoint(); got != mark {
			t.Fatalf("checkpoint %s, want %s", got, mark)
		}
		if got := p.settledCheckpoint(); got != settled {
			t.Fatalf("settled checkpoint %s, want %s", got, settled)
		}
	}
	check("10", "10")
	p.addBookmark("20")
	check("20", "10")
	m := p.add("21", 1)
	p.addBookmark("25") // queued behind the change, done with it
	check("20", "10")
	m.Done()
	check("25", "21")
	p.add("30", 0) // a filtered change moves it as a change does
	check("30", "30")
}
