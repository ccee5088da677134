package informer

import (
	"testing"
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
