package informer

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress is the checkpoint of one watch stream: the newest
// resourceVersion R such that every change the stream delivered up to and
// including R is done. A change is done once every sink has acknowledged
// it, or it was filtered, suppressed, folded into a newer change or
// refused for good. Sinks acknowledge out of order (shards, partitions,
// several sinks), so R advances only over the contiguous prefix of done
// changes, in the order the watch delivered them.
//
// Entries are added by the handler's goroutine, in stream order; Done is
// called from the dispatchers' goroutines.
type progress struct {
	id uint64

	mu sync.Mutex
	// ring[head:] are the entries not yet done, or done behind one that is
	// not; first is the sequence number of ring[head]. ring[dhead:] are
	// the entries not yet durable, or behind one that is not (dhead >=
	// head: done is durable).
	ring  []entry
	head  int
	dhead int
	first uint64
	// mark is the checkpoint, and marked when it last moved; durable is
	// the spool's position: the newest version up to which every change
	// is done or written to a spool.
	mark    string
	marked  time.Time
	durable string
	// settled is where mark was before the bookmarks since its last move
	// over anything else: a checkpoint that moved only by bookmarks has
	// no change to repeat after a crash, so its save can wait
	// (checkpoint.Entry.Settled).
	settled string
	// held keeps mark where it is (heldMark takes its moves) until
	// release: while a spool of an earlier process replays, changes before
	// the resume point are in no broker yet.
	held     bool
	heldMark string
}

// entry is one change of the stream, or a position the stream reached
// without a change (a bookmark, the end of a list).
type entry struct {
	// rv is the resourceVersion the stream has reached once this entry is
	// done; "" for the records of a list, whose versions are not in
	// stream order (the list's end is an entry of its own).
	rv string
	// bookmark says the entry is a bookmark: the stream moved with no
	// change.
	bookmark bool
	// left counts the acknowledgements still missing, open the sinks
	// that have neither acknowledged it nor written it to their spool, and
	// out the copies read back from a spool and not yet acknowledged: a
	// spool's read position is past them, so they are on no disk.
	left, open, out int32
}

// Mark is a Change's place in its watch stream. Each sink the change goes
// to calls Done once, when the change is done for that sink. The zero Mark
// (snapshot records and markers, which are not part of the watch stream)
// does nothing.
type Mark struct {
	p   *progress
	seq uint64
	// spooled says the Mark is that of a copy read back from a spool.
	spooled bool
}

// Done records that one sink is done with the change.
func (m Mark) Done() {
	if m.p != nil {
		m.p.done(m.seq, m.spooled)
	}
}

// Spooled records that one sink wrote the change to its spool (or, for a
// copy read back, wrote it back at shutdown): it is not done, but a restart
// on the same spool delivers it.
func (m Mark) Spooled() {
	if m.p != nil {
		m.p.spooled(m.seq, m.spooled)
	}
}

// Token identifies m across a spool: a record written and read back by the
// same process finds its Mark again with MarkOf.
func (m Mark) Token() (stream, seq uint64) {
	if m.p == nil {
		return 0, 0
	}
	return m.p.id, m.seq
}

var (
	// streams maps a progress id to its progress, for MarkOf.
	streams sync.Map
	// streamIDs start at the process's start time, so that a token read
	// from a spool another process wrote matches no stream of this one.
	streamIDs atomic.Uint64
)

func init() { streamIDs.Store(uint64(time.Now().UnixNano())) }

// MarkOf is the Mark a Token came from, or the zero Mark if that stream is
// not one of this process's. It is called as a spool hands a record back:
// the copy is then on no disk until it is acknowledged, and the stream's
// spool position stays before it.
func MarkOf(stream, seq uint64) Mark {
	if stream == 0 {
		return Mark{}
	}
	v, ok := streams.Load(stream)
	if !ok {
		return Mark{}
	}
	p := v.(*progress)
	p.readBack(seq)
	return Mark{p: p, seq: seq, spooled: true}
}

func newProgress(from string) *progress {
	p := &progress{id: streamIDs.Add(1), mark: from, durable: from, settled: from, marked: time.Now()}
	streams.Store(p.id, p)
	return p
}

// close forgets the stream: tokens read back after it find nothing.
func (p *progress) close() { streams.Delete(p.id) }

// add appends an entry that needs acks acknowledgements, and returns its
// Mark; with acks 0 the entry is done at once.
func (p *progress) add(rv string, acks int32) Mark { return p.addEntry(rv, acks, false) }

// addBookmark appends a bookmark's version, done at once.
func (p *progress) addBookmark(rv string) { p.addEntry(rv, 0, true) }

func (p *progress) addEntry(rv string, acks int32, bookmark bool) Mark {
	p.mu.Lock()
	defer p.mu.Unlock()
	if acks <= 0 && p.head == len(p.ring) {
		// Nothing before it is pending: the fast path of a quiet stream.
		p.advance(rv, bookmark)
		p.advanceDurable(rv)
		p.first++
		return Mark{}
	}
	if len(p.ring) == cap(p.ring) && p.head > 0 {
		n := copy(p.ring, p.ring[p.head:])
		clear(p.ring[n:])
		p.ring, p.dhead, p.head = p.ring[:n], p.dhead-p.head, 0
	}
	seq := p.first + uint64(len(p.ring)-p.head)
	// A copy: a raw object's version is a view into its JSON, which the
	// entry would otherwise keep until every sink is done with the change,
	// through a whole broker outage.
	p.ring = append(p.ring, entry{rv: strings.Clone(rv), left: acks, open: acks, bookmark: bookmark})
	if acks <= 0 {
		p.settle()
		return Mark{}
	}
	return Mark{p: p, seq: seq}
}

// at is the index of seq in ring, or -1 if it is gone. The caller holds mu.
func (p *progress) at(seq uint64) int {
	if seq < p.first {
		return -1
	}
	i := p.head + int(seq-p.first)
	if i >= len(p.ring) {
		return -1
	}
	return i
}

func (p *progress) done(seq uint64, readBack bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.at(seq); i >= 0 {
		p.ring[i].left--
		if readBack {
			p.ring[i].out--
		} else {
			p.ring[i].open--
		}
		p.settle()
	}
}

func (p *progress) spooled(seq uint64, readBack bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.at(seq); i >= 0 {
		if readBack {
			p.ring[i].out--
		} else {
			p.ring[i].open--
		}
		p.settle()
	}
}

func (p *progress) readBack(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.at(seq); i >= 0 {
		p.ring[i].out++
	}
}

// settle moves both positions over the entries that allow it. The caller
// holds mu.
func (p *progress) settle() {
	if p.dhead < p.head {
		p.dhead = p.head
	}
	for p.dhead < len(p.ring) && p.ring[p.dhead].open <= 0 {
		p.advanceDurable(p.ring[p.dhead].rv)
		p.dhead++
	}
	for p.head < len(p.ring) && p.ring[p.head].left <= 0 {
		p.advance(p.ring[p.head].rv, p.ring[p.head].bookmark)
		p.ring[p.head] = entry{}
		p.head++
		p.first++
	}
	if p.head == len(p.ring) {
		p.ring, p.head, p.dhead = p.ring[:0], 0, 0
	}
}

// advance moves the checkpoint to rv, reached by a bookmark or not. The
// caller holds mu.
func (p *progress) advance(rv string, bookmark bool) {
	switch {
	case rv == "":
	case p.held:
		p.heldMark = rv
	case rv != p.mark:
		p.mark, p.marked = rv, time.Now()
		if !bookmark {
			p.settled = rv
		}
	}
}

// hold keeps the checkpoint at acked until release.
func (p *progress) hold(acked string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.heldMark, p.mark, p.held = p.mark, acked, true
}

// release lets the checkpoint move, to where it would have moved.
func (p *progress) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.advance(p.heldMark, false)
}

func (p *progress) advanceDurable(rv string) {
	if rv != "" {
		p.durable = rv
	}
}

// checkpoint is the stream's checkpoint and when it last moved.
func (p *progress) checkpoint() (string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mark, p.marked
}

// settledCheckpoint is where the checkpoint was before the bookmarks that
// moved it since anything else last did.
func (p *progress) settledCheckpoint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled
}

// spoolPosition is the newest version up to which every change is done or
// sits in a spool: not past a copy a spool has handed back and no sink has
// acknowledged yet.
func (p *progress) spoolPosition() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.mark
	for i := p.head; i < p.dhead && i < len(p.ring); i++ {
		if p.ring[i].out > 0 {
			return last
		}
		if p.ring[i].rv != "" {
			last = p.ring[i].rv
		}
	}
	return p.durable
}

// pending is how many entries wait on one before them or on themselves.
func (p *progress) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ring) - p.head
}
