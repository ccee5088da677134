package dispatch

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// A process killed with SIGKILL (or by the OOM killer) loses what memory
// held, and nothing on disk says what that was. If it held records of a
// snapshot whose completed marker was already spooled, the next start
// replays that marker without its records, and a consumer that prunes on it
// deletes live objects. So a spool remembers whether the process that wrote
// it ended cleanly: runningFile exists from UseSpool until Close has kept
// everything. After an unclean end, a completed marker replayed from the
// spool goes out as incomplete unless the spool itself proves the snapshot
// whole: its started marker and as many of its records as the marker counts,
// read back before it.
const runningFile = "running"

// markRunning records that a process uses the spool, and reports whether
// the previous one ended without Close.
func (d *Dispatcher) markRunning() (unclean bool, err error) {
	path := filepath.Join(d.spool.Dir, runningFile)
	_, serr := os.Stat(path)
	unclean = serr == nil
	return unclean, os.WriteFile(path, nil, 0o600)
}

// markClean records that Close kept everything it could.
func (d *Dispatcher) markClean() {
	if d.spool == nil {
		return
	}
	if err := os.Remove(filepath.Join(d.spool.Dir, runningFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("spool: cannot record a clean shutdown; the next start will take this one for a crash", "err", err)
	}
}

// replayProof follows a lane's records left by a process that ended
// uncleanly, as they are read back in order.
type replayProof struct {
	left int64 // records still to be read that the earlier process wrote
	// started holds the snapshots whose started marker was read back;
	// read counts, per snapshot, its records read back, delivered from
	// here or skipped (and then counted as not delivered already).
	started   map[string]bool
	read      map[string]int
	uncertain bool // the earlier process ended without Close
	skips     int  // records skipped (SetReplaySkip)
}

// record counts a record of a snapshot read back.
func (p *replayProof) record(c *informer.Change) {
	if c.Op != informer.OpSynced || c.SnapshotID == "" {
		return
	}
	if p.read == nil {
		p.read = map[string]int{}
	}
	p.read[c.SnapshotID]++
}

// SetReplaySkip makes the spool skip the records an earlier process left
// for which skip returns true: changes the watch is about to deliver again,
// because it resumes from before them. A killed process loses the records
// its spool had handed to memory and not delivered; the watch, resumed from
// before those, brings them back, but only after the spool's remaining
// records, which are newer: a key's versions would go backwards. Skipping
// what the watch repeats keeps each key in order. A skipped snapshot record
// leaves its completed marker incomplete. It must be called before Start.
func (d *Dispatcher) SetReplaySkip(skip func(c *informer.Change, ev *encoding.Event) bool) {
	d.replaySkip = skip
}

// skipped reports whether a record read back is one SetReplaySkip skips,
// and accounts for it.
func (p *replayProof) skipped(d *Dispatcher, c *informer.Change, ev *encoding.Event) bool {
	if p.left <= 0 || d.replaySkip == nil || c.IsMarker() || !d.replaySkip(c, ev) {
		return false
	}
	p.left--
	p.skips++
	// Counted here as not delivered, and as read: it was in the spool, so
	// the marker's check below must not count it a second time.
	d.markIncomplete(c)
	p.record(c)
	return true
}

// check looks at one record read back from the spool. For a completed
// marker that the spool cannot prove whole, it records the records that
// may be missing, so that the marker goes out marked incomplete.
//
// The count is the number of records not delivered, each counted once:
// the marker's count less the records read back here (delivered now, or
// skipped and counted when skipped) and less those an earlier run already
// counted (dropped or skipped then, and so in no spool now). Without the
// snapshot's started marker, records before the spool's first one may
// have been delivered or lost with the process; they count as lost.
func (p *replayProof) check(d *Dispatcher, c *informer.Change, ev *encoding.Event) {
	if p.left <= 0 {
		return
	}
	p.left--
	if !p.uncertain {
		return
	}
	switch c.Op {
	case informer.OpSnapshotStarted:
		if p.started == nil {
			p.started = map[string]bool{}
		}
		p.started[c.SnapshotID] = true
		delete(p.read, c.SnapshotID)
	case informer.OpSynced:
		p.record(c)
	case informer.OpSnapshotCompleted:
		count := markerCount(ev)
		read, started := p.read[c.SnapshotID], p.started[c.SnapshotID]
		delete(p.started, c.SnapshotID)
		delete(p.read, c.SnapshotID)
		earlier := d.loadedIncomplete[c.SnapshotID]
		missing := count - read - earlier
		if started && missing <= 0 {
			return
		}
		if missing <= 0 {
			if d.incompleteOf(c.SnapshotID) > 0 {
				return // already marked, and nothing proves more missing
			}
			missing = 1
		}
		d.log.Warn("spool: a snapshot's completed marker was replayed after kubewire ended without a clean shutdown, and the spool does not hold all its records; it goes out marked incomplete",
			"resource", c.Key, "snapshot", c.SnapshotID, "records", count, "spooled", read, "countedBefore", earlier, "missing", missing)
		d.restoreIncomplete(c.SnapshotID, missing)
	}
}

// markerCount is the record count a completed marker's event carries.
func markerCount(ev *encoding.Event) int {
	var m encoding.SnapshotMarker
	if err := json.Unmarshal(ev.Data(), &m); err != nil || m.Count == nil {
		return 0
	}
	return *m.Count
}

// SpoolAsLeft reports whether UseSpool found the spool as the process before
// left it: the directory held a spool, and none of its files was cut short,
// unless that process was killed (a record a kill cuts short was never
// counted as spooled). A position saved beside the spools, which counts
// the changes in them as kept, holds only while each spool is as it was
// left: a spool made anew, or one that lost records, does not hold them.
// False without a spool.
func (d *Dispatcher) SpoolAsLeft() bool {
	return d.spool != nil && d.spoolFound && (!d.spoolCut.Load() || d.uncleanStart)
}

// Replayed is closed once every record an earlier process left in the
// spool has been delivered, or dropped or skipped for good. Until then the
// stream's checkpoint must not pass them: they are in no broker yet, and
// the spool's read position is past those read back (SetReplaySkip).
func (d *Dispatcher) Replayed() <-chan struct{} { return d.replayed }

// OldRecords is how many records of an earlier process are not yet
// delivered.
func (d *Dispatcher) OldRecords() int64 { return d.oldRecords.Load() }

// oldDone records that one record of an earlier process is done with.
func (d *Dispatcher) oldDone() {
	if d.oldRecords.Add(-1) == 0 {
		d.replayedOnce.Do(func() { close(d.replayed) })
	}
}
