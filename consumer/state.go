package consumer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// stateFormat names the layout SaveState writes; LoadState refuses others.
const stateFormat = "kubewire.view/v1"

// A saved state is JSON lines: a header, one line per record, and a trailer
// with the record count, so that a file cut short is refused rather than
// loaded as a View that silently lacks objects.
type stateHeader struct {
	Format    string    `json:"format"`
	Positions Positions `json:"positions"`
	Seq       uint64    `json:"seq"`
	Stats     Stats     `json:"stats"`
}

// stateRecord is one line. Kind is one of object, gone, pruned, window,
// done, watchgap, end.
type stateRecord struct {
	Kind      string          `json:"kind"`
	Key       string          `json:"key,omitempty"`
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name,omitempty"`
	UID       string          `json:"uid,omitempty"`
	RV        string          `json:"rv,omitempty"`
	Reference bool            `json:"reference,omitempty"`
	Type      string          `json:"type,omitempty"`
	Partition string          `json:"partition,omitempty"`
	Snapshot  string          `json:"snapshot,omitempty"`
	Resource  string          `json:"resource,omitempty"`
	Seq       uint64          `json:"seq,omitempty"`
	Object    json.RawMessage `json:"object,omitempty"`
	Count     int             `json:"count,omitempty"`
	// Forgot is an entry's: the seq of the watch.gap that made the View
	// forget the key's version.
	Forgot uint64 `json:"forgot,omitempty"`
	// SkipTomb is an object's: the partition whose next tombstone of the
	// key is not applied.
	SkipTomb string `json:"skiptomb,omitempty"`
	// Listed is an object's: snapshots that listed it in another
	// partition.
	Listed []stateListing `json:"listed,omitempty"`
	// SID is an object's: the snapshot whose synced record set it.
	SID string `json:"sid,omitempty"`
}

// stateListing is a listing of an object: a snapshot that listed it in
// another partition.
type stateListing struct {
	Snapshot  string `json:"snapshot"`
	Partition string `json:"partition"`
}

// SaveState writes everything the View holds and knows, with its position,
// so that LoadState on a new View continues exactly where this one stands:
// the objects, the deleted and pruned keys the rule remembers, the snapshot
// windows open and applied, and the watch gaps reported. It waits for the
// event being applied, if any, and its handlers; the position it writes is
// that of the state it writes.
//
// A consumer that restarts from the saved state and its position does not
// depend on the topic or stream still holding the events the state was
// built from, so it works under retention. Save it before the broker learns
// of the progress (see KafkaConfig.BeforeCommit and
// JetStreamConfig.BeforeAck), or read with Start set to the state's
// position.
func (v *View) SaveState(w io.Writer) error {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.saveLocked(w, "")
}

// saveLocked writes the state of one partition, or with only "" of the
// whole View. A partition's state holds what the rule keeps of that
// partition's keys and windows, and the partition's position; its stats
// are zero, as they count the whole View.
func (v *View) saveLocked(w io.Writer, only string) error {
	mine := func(partition string) bool { return only == "" || partition == only }
	h := stateHeader{Format: stateFormat, Positions: v.pos, Seq: v.seq, Stats: v.stats}
	if only != "" {
		h.Positions, h.Stats = Positions{}, Stats{}
		if o, ok := v.pos[only]; ok {
			h.Positions[only] = o
		}
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	n := 0
	put := func(r stateRecord) error {
		n++
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("consumer: save state of %s: %w", r.Key, err)
		}
		return nil
	}
	entryRecord := func(kind string, e *entry) stateRecord {
		return stateRecord{
			Kind: kind, Key: e.Key, Namespace: e.Namespace, Name: e.Name, UID: e.UID, RV: e.ResourceVersion,
			Reference: e.Reference, Type: e.typ, Partition: e.partition, Seq: e.seq, Object: e.JSON, Forgot: e.forgot, SkipTomb: e.skipTomb, Listed: listingsOut(e.listed), SID: e.sid,
		}
	}
	// Sorted, so that one state always gives the same bytes.
	for _, k := range sortedKeys(v.objects) {
		if e := v.objects[k]; mine(e.partition) {
			if err := put(entryRecord("object", e)); err != nil {
				return err
			}
		}
	}
	for _, k := range sortedKeys(v.gone) {
		if e := v.gone[k]; mine(e.partition) {
			if err := put(entryRecord("gone", &e)); err != nil {
				return err
			}
		}
	}
	for _, k := range sortedKeys(v.pruned) {
		if only != "" && v.gone[k].partition != only {
			continue
		}
		if err := put(stateRecord{Kind: "pruned", Key: k, Seq: v.pruned[k]}); err != nil {
			return err
		}
	}
	for _, wk := range sortedWindows(v.windows) {
		if !mine(wk.partition) {
			continue
		}
		w := v.windows[wk]
		if err := put(stateRecord{Kind: "window", Partition: wk.partition, Snapshot: wk.snapshotID, Resource: w.resource, Seq: w.start}); err != nil {
			return err
		}
	}
	for _, wk := range sortedWindows(v.done) {
		if !mine(wk.partition) {
			continue
		}
		if err := put(stateRecord{Kind: "done", Partition: wk.partition, Snapshot: wk.snapshotID, Seq: v.done[wk]}); err != nil {
			return err
		}
	}
	// Watch gaps go with every partition: one gap is reported once
	// whichever partition brings it.
	for _, id := range sortedKeys(v.watchGaps) {
		if err := put(stateRecord{Kind: "watchgap", Key: id}); err != nil {
			return err
		}
	}
	if err := enc.Encode(stateRecord{Kind: "end", Count: n}); err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	return nil
}

// ErrStateInUse is returned by LoadState on a View that has already read,
// been loaded, or has handlers or watches.
var ErrStateInUse = errors.New("consumer: a state can only be loaded into a new View, before its sources, handlers and watches")

// LoadState reads a state SaveState wrote into a new View: call it before
// starting any source and before adding handlers. Handlers added afterwards
// get the loaded objects as initial adds, as a client-go informer's do at
// its start; sources started afterwards go on from the state's position
// (KafkaConfig.Start and JetStreamConfig.Start take View.Position(); a
// consumer group or a durable consumer skips what the state already holds).
// A state cut short, or of another format, is refused and leaves the View
// empty.
func (v *View) LoadState(r io.Reader) error {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seq != 0 || len(v.pos) != 0 || len(v.objects) != 0 || len(v.handlers) != 0 || len(v.observers) != 0 {
		return ErrStateInUse
	}
	if err := v.loadLocked(r); err != nil {
		fresh := NewView(v.opt)
		v.objects, v.byNamespace, v.gone, v.pruned = fresh.objects, fresh.byNamespace, fresh.gone, fresh.pruned
		v.windows, v.done, v.watchGaps, v.pos, v.seq, v.stats = fresh.windows, fresh.done, fresh.watchGaps, fresh.pos, 0, Stats{}
		return err
	}
	return nil
}

func (v *View) loadLocked(r io.Reader) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	var h stateHeader
	if err := dec.Decode(&h); err != nil {
		return fmt.Errorf("consumer: load state: reading its header: %w", err)
	}
	if h.Format != stateFormat {
		return fmt.Errorf("consumer: load state: format %q, want %q", h.Format, stateFormat)
	}
	for p, o := range h.Positions {
		v.pos[v.interned(p)] = o
	}
	v.seq, v.stats = h.Seq, h.Stats
	for n := 0; ; n++ {
		var rec stateRecord
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("consumer: load state: record %d: %w (the state is cut short or damaged)", n+1, err)
		}
		e := entry{
			Object:    Object{Key: rec.Key, Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, ResourceVersion: rec.RV, JSON: fitted(rec.Object), Reference: rec.Reference},
			partition: v.interned(rec.Partition), seq: rec.Seq, typ: rec.Type, forgot: rec.Forgot, skipTomb: v.interned(rec.SkipTomb), listed: v.listingsIn(rec.Listed), sid: v.interned(rec.SID),
		}
		wk := windowKey{partition: v.interned(rec.Partition), snapshotID: rec.Snapshot}
		switch rec.Kind {
		case "object":
			if len(rec.Object) == 0 {
				return fmt.Errorf("consumer: load state: object %s has no JSON", rec.Key)
			}
			e.Name = nameOf(e.Key, e.Name)
			held := e
			v.objects[e.Key] = &held
			v.index(&held)
		case "gone":
			v.gone[e.Key] = e
		case "pruned":
			v.pruned[rec.Key] = rec.Seq
		case "window":
			v.windows[wk] = window{resource: rec.Resource, start: rec.Seq}
		case "done":
			v.done[wk] = rec.Seq
		case "watchgap":
			v.watchGaps[rec.Key] = struct{}{}
		case "end":
			if rec.Count != n {
				return fmt.Errorf("consumer: load state: %d records, its trailer says %d", n, rec.Count)
			}
			return nil
		default:
			return fmt.Errorf("consumer: load state: record %d has unknown kind %q", n+1, rec.Kind)
		}
	}
}

// SaveStateFile writes the View's state to path so that a crash at any
// moment leaves either the previous file or the new one whole: it writes a
// temporary file beside it, syncs it, and renames it over path.
func (v *View) SaveStateFile(path string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	defer os.Remove(f.Name()) // after a successful rename, there is nothing to remove
	if err := v.SaveState(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("consumer: save state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("consumer: save state: %w", err)
	}
	// The rename is durable only once the directory is.
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("consumer: save state: sync %s: %w", dir, err)
		}
	}
	return nil
}

// LoadStateFile loads a state SaveStateFile wrote. A missing file is not an
// error: the View stays new and reads from the beginning.
func (v *View) LoadStateFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer: load state: %w", err)
	}
	defer f.Close()
	if err := v.LoadState(f); err != nil {
		return fmt.Errorf("%w (file %s)", err, path)
	}
	return nil
}

func listingsOut(ls []listing) []stateListing {
	var out []stateListing
	for _, l := range ls {
		out = append(out, stateListing{Snapshot: l.sid, Partition: l.partition})
	}
	return out
}

func (v *View) listingsIn(ls []stateListing) []listing {
	var out []listing
	for _, l := range ls {
		out = append(out, listing{v.interned(l.Snapshot), v.interned(l.Partition)})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortedWindows[V any](m map[windowKey]V) []windowKey {
	ks := make([]windowKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].partition != ks[j].partition {
			return ks[i].partition < ks[j].partition
		}
		return ks[i].snapshotID < ks[j].snapshotID
	})
	return ks
}
