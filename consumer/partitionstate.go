package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/watch"
)

// PartitionStates keeps the View state of each partition of a topic where
// every member of a consumer group can read and write it, so that a
// partition's state goes with the partition when the group hands it from
// one member to another (see KafkaConfig.States).
//
// A state is saved with its position, the partition's next offset. During
// a hand-off two members can save one partition for a moment, and a member
// the group has already given up on can save late: Load must return the
// state of the highest position saved, never an older one saved after it.
type PartitionStates interface {
	// Load returns the newest state saved for partition, or nil and no
	// error when none was.
	Load(ctx context.Context, partition string) ([]byte, error)
	// Save stores the state of partition as of position.
	Save(ctx context.Context, partition string, position int64, state []byte) error
}

// DirStates keeps partition states as files under dir, one directory per
// partition and one file per state named by its position, written to a
// temporary file, synced and renamed, so that a crash leaves whole files
// only. Every member of the group must see the same dir: on one host, or
// on a volume they share (a ReadWriteMany PersistentVolume, say).
func DirStates(dir string) PartitionStates { return dirStates(dir) }

type dirStates string

// stateSuffix ends every state file's name; the rest is the position.
const stateSuffix = ".state"

func (d dirStates) dir(partition string) string {
	return filepath.Join(string(d), url.PathEscape(partition))
}

// newest returns the position and path of partition's newest state, and
// the paths of the older ones.
func (d dirStates) newest(partition string) (pos int64, path string, older []string, err error) {
	des, err := os.ReadDir(d.dir(partition))
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil, nil
	}
	if err != nil {
		return 0, "", nil, fmt.Errorf("consumer: states of %s: %w", partition, err)
	}
	pos = -1
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), stateSuffix)
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		o, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		p := filepath.Join(d.dir(partition), de.Name())
		switch {
		case o > pos:
			if path != "" {
				older = append(older, path)
			}
			pos, path = o, p
		default:
			older = append(older, p)
		}
	}
	return pos, path, older, nil
}

func (d dirStates) Load(_ context.Context, partition string) ([]byte, error) {
	_, path, _, err := d.newest(partition)
	if err != nil || path == "" {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		// Another member saved a newer one and removed this one
		// between the listing and the read.
		_, path, _, err = d.newest(partition)
		if err != nil || path == "" {
			return nil, err
		}
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: state of %s: %w", partition, err)
	}
	return b, nil
}

func (d dirStates) Save(_ context.Context, partition string, position int64, state []byte) error {
	dir := d.dir(partition)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	defer os.Remove(f.Name()) // after the rename, there is nothing to remove
	if _, err := f.Write(state); err != nil {
		f.Close()
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	// Zero-padded, so that the names sort as the positions do.
	final := filepath.Join(dir, fmt.Sprintf("%020d%s", position, stateSuffix))
	if err := os.Rename(f.Name(), final); err != nil {
		return fmt.Errorf("consumer: save state of %s: %w", partition, err)
	}
	if dd, err := os.Open(dir); err == nil {
		err = dd.Sync()
		dd.Close()
		if err != nil {
			return fmt.Errorf("consumer: save state of %s: sync %s: %w", partition, dir, err)
		}
	}
	// Only the newest is ever loaded. A late save of an older position
	// stays beside it until the next save removes it.
	_, _, older, err := d.newest(partition)
	if err != nil {
		return err
	}
	for _, p := range older {
		os.Remove(p)
	}
	return nil
}

// statePosition reads the position of partition from a saved state's header.
func statePosition(state []byte, partition string) (int64, error) {
	line, _, _ := bytes.Cut(state, []byte("\n"))
	var h stateHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return 0, fmt.Errorf("reading its header: %w", err)
	}
	if h.Format != stateFormat {
		return 0, fmt.Errorf("format %q, want %q", h.Format, stateFormat)
	}
	return h.Positions[partition], nil
}

// partitionsHeld returns the partitions the View has a position in.
func (v *View) partitionsHeld() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]string, 0, len(v.pos))
	for p := range v.pos {
		out = append(out, p)
	}
	return out
}

// partitionState returns the state of one partition and its position in
// it, as one consistent pair: it waits for the event being applied.
func (v *View) partitionState(partition string) ([]byte, int64, error) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.RLock()
	defer v.mu.RUnlock()
	var b bytes.Buffer
	if err := v.saveLocked(&b, partition); err != nil {
		return nil, 0, err
	}
	return b.Bytes(), v.pos[partition], nil
}

// adopt takes over the state of one partition that another member (or this
// one, before a restart) saved: its objects, what the rule remembers of its
// keys and windows, and its position. The objects come to the handlers as
// adds with isInInitialList true, as a loaded state's do. A key the View
// already knows from another partition (the topic grew) keeps the newer of
// the two, counting a delete as a version.
func (v *View) adopt(partition string, state []byte) error {
	in := NewView(v.opt)
	if err := in.loadLocked(bytes.NewReader(state)); err != nil {
		return fmt.Errorf("consumer: the state of %s: %w", partition, err)
	}
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.Lock()
	// The loaded state numbers its events on its own. They are numbered
	// again after this View's, in their order, so that the rule compares
	// them as before, and densely: their count, not the saver's, is what
	// the View's number grows by, or every hand-off would add the other
	// partitions' events to it again.
	base := v.seq
	var seqs []uint64
	for _, e := range in.objects {
		if e.partition == partition {
			seqs = append(seqs, e.seq)
			if e.forgot != 0 {
				seqs = append(seqs, e.forgot)
			}
		}
	}
	for k, e := range in.gone {
		if e.partition == partition {
			seqs = append(seqs, e.seq)
			if e.forgot != 0 {
				seqs = append(seqs, e.forgot)
			}
			if s, ok := in.pruned[k]; ok {
				seqs = append(seqs, s)
			}
		}
	}
	for wk, w := range in.windows {
		if wk.partition == partition {
			seqs = append(seqs, w.start)
		}
	}
	for wk, s := range in.done {
		if wk.partition == partition && s != 0 {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	renumber := func(s uint64) uint64 {
		if s == 0 {
			return 0 // forgot: none
		}
		i, _ := slices.BinarySearch(seqs, s)
		return base + uint64(i) + 1
	}
	var cs []change
	pos, hasPos := in.pos[partition]
	at := Position{Partition: partition, Offset: pos}
	// A key the View already knows from another partition (the topic
	// grew, and the key's events moved) keeps the newer of the two, a
	// delete counting as a version: neither partition's copy is newer for
	// being adopted, nor older for being held. On a tie the View's stays.
	newer := func(k, rv string) bool {
		if h := v.objects[k]; h != nil {
			return olderRV(h.ResourceVersion, rv)
		}
		if g, ok := v.gone[k]; ok {
			return olderRV(g.ResourceVersion, rv)
		}
		return true
	}
	// A prune is no delete: it says only that the key had no record in
	// its partition's window. An object the adopted partition holds at
	// the version a prune removed it at is live (the topic grew, and the
	// key's records moved there).
	pruneOnly := func(k, rv string) bool {
		g, ok := v.gone[k]
		_, pruned := v.pruned[k]
		return ok && pruned && g.ResourceVersion == rv
	}
	for k, e := range in.objects {
		if e.partition != partition {
			continue
		}
		if h := v.objects[k]; h != nil && h.ResourceVersion == e.ResourceVersion && e.sid != "" {
			// Both partitions hold the key at one version (the topic
			// grew): the View's copy stays, and the snapshot that
			// listed it in the adopted partition keeps its window in
			// the View's partition from pruning it, as if the View had
			// read that record itself.
			h.listed = listedToo(h.listed, listing{v.interned(e.sid), v.interned(partition)})
		}
		if !newer(k, e.ResourceVersion) && !pruneOnly(k, e.ResourceVersion) {
			continue
		}
		e.partition, e.sid = v.interned(e.partition), v.interned(e.sid)
		e.seq, e.forgot = renumber(e.seq), renumber(e.forgot)
		old := v.objects[k]
		if old != nil {
			v.unindex(old)
		}
		v.objects[k] = e
		v.index(e)
		delete(v.gone, k)
		delete(v.pruned, k)
		if old != nil {
			cs = append(cs, change{pos: at, kind: watch.Modified, key: k, old: &old.Object, obj: &e.Object})
			continue
		}
		cs = append(cs, change{pos: at, kind: watch.Added, key: k, obj: &e.Object, listed: true})
	}
	for k, e := range in.gone {
		if e.partition != partition || !newer(k, e.ResourceVersion) {
			continue
		}
		if old := v.objects[k]; old != nil {
			cs = append(cs, v.remove(at, old, nil, true))
		}
		e.partition = v.interned(e.partition)
		e.seq, e.forgot = renumber(e.seq), renumber(e.forgot)
		v.gone[k] = e
		delete(v.pruned, k)
		if s, ok := in.pruned[k]; ok {
			v.pruned[k] = renumber(s)
		}
	}
	for wk, w := range in.windows {
		if wk.partition == partition {
			w.start = renumber(w.start)
			v.windows[windowKey{v.interned(wk.partition), wk.snapshotID}] = w
		}
	}
	for wk, s := range in.done {
		if wk.partition == partition {
			v.done[windowKey{v.interned(wk.partition), wk.snapshotID}] = renumber(s)
		}
	}
	for id := range in.watchGaps {
		v.watchGaps[id] = struct{}{}
	}
	v.seq = base + uint64(len(seqs))
	if hasPos {
		v.pos[v.interned(partition)] = pos
	}
	v.mu.Unlock()
	v.deliver(cs, nil)
	return nil
}

// release gives up one partition the group handed to another member: the
// View forgets its objects, what the rule remembers of them, and its
// position. Handlers are not called, as nothing was deleted; watches of a
// ListerWatcher end with 410 Gone, as after a gap, so that their informers
// list again and drop the objects.
func (v *View) release(partition string) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.Lock()
	for k, e := range v.objects {
		if e.partition == partition {
			delete(v.objects, k)
			delete(v.pruned, k)
			v.unindex(e)
		}
	}
	for k, e := range v.gone {
		if e.partition == partition {
			delete(v.gone, k)
			delete(v.pruned, k)
		}
	}
	for wk := range v.windows {
		if wk.partition == partition {
			delete(v.windows, wk)
		}
	}
	for wk := range v.done {
		if wk.partition == partition {
			delete(v.done, wk)
		}
	}
	pos := v.pos[partition]
	delete(v.pos, partition)
	v.mu.Unlock()
	v.deliver([]change{{pos: Position{Partition: partition, Offset: pos}, kind: watch.Error}}, nil)
}
