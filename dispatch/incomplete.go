package dispatch

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"

	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/metrics"
)

// A snapshot's completed marker may wait in the spool across a restart while
// the count of its dropped records lives in memory. Losing the count would
// send the marker out unmarked, and consumers would prune the objects whose
// records were dropped. So, with a spool, the counts are kept in a file next
// to it, rewritten whenever they change (only when a record is dropped or
// such a marker is written, which is rare).
const incompleteFile = "snapshots-incomplete.json"

// saveIncomplete writes the counts; the caller holds incompleteMu.
func (d *Dispatcher) saveIncomplete() {
	if d.spool == nil {
		return
	}
	path := filepath.Join(d.spool.Dir, incompleteFile)
	if len(d.incomplete) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Warn("spool: removing the incomplete-snapshot counts", "err", err)
		}
		return
	}
	b, _ := json.Marshal(d.incomplete)
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		metrics.SpoolErrors.WithLabelValues(d.name, "write").Inc()
		d.log.Error("spool: cannot keep the counts of undelivered snapshot records; a restart may lose them", "err", err)
	}
}

// loadIncomplete reads the counts an earlier run kept.
func (d *Dispatcher) loadIncomplete() {
	b, err := os.ReadFile(filepath.Join(d.spool.Dir, incompleteFile))
	if err != nil {
		return
	}
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	if err := json.Unmarshal(b, &d.incomplete); err != nil {
		metrics.SpoolErrors.WithLabelValues(d.name, "read").Inc()
		d.log.Error("spool: cannot read the counts of undelivered snapshot records", "err", err)
		return
	}
	d.loadedIncomplete = maps.Clone(d.incomplete)
}

// incompleteOf is the count of undelivered records of a snapshot so far.
func (d *Dispatcher) incompleteOf(snapshotID string) int {
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	return d.incomplete[snapshotID]
}

// markIncomplete remembers that a record of a snapshot was dropped, so the
// snapshot's completed marker says so: a consumer that pruned on it would
// delete the live object whose record is missing.
func (d *Dispatcher) markIncomplete(c *informer.Change) {
	if c.Op != informer.OpSynced || c.SnapshotID == "" {
		return
	}
	d.incompleteMu.Lock()
	if d.incomplete == nil {
		d.incomplete = map[string]int{}
	}
	d.incomplete[c.SnapshotID]++
	d.saveIncomplete()
	d.incompleteMu.Unlock()
}

func (d *Dispatcher) restoreIncomplete(snapshotID string, n int) {
	if n <= 0 {
		return
	}
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	if d.incomplete == nil {
		d.incomplete = map[string]int{}
	}
	d.incomplete[snapshotID] += n
	d.saveIncomplete()
}

func (d *Dispatcher) takeIncomplete(snapshotID string) int {
	d.incompleteMu.Lock()
	defer d.incompleteMu.Unlock()
	n := d.incomplete[snapshotID]
	if n > 0 {
		delete(d.incomplete, snapshotID)
		d.saveIncomplete()
	}
	return n
}
