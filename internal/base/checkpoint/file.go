package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
)

// File keeps the spool's own position beside the spool: per resource and
// watch stream, the version up to which every change was delivered or
// written to a spool. It is further along than the Lease's checkpoint
// while a sink is down, and valid only where the spool survived: a restart
// on the same volume resumes from it (the spool replays what it holds),
// while a new pod on an empty volume finds no file and resumes from the
// Lease.
type File struct {
	path string
	last map[string]Entry
}

// FileName is the position file's name in dispatch.spoolDir.
const FileName = "positions.json"

// NewFile returns the position file in dir (dispatch.spoolDir).
func NewFile(dir string) *File { return &File{path: filepath.Join(dir, FileName)} }

// Load reads the positions; a missing file holds none.
func (f *File) Load() (map[string]Entry, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Entry{}, nil
	}
	if err != nil {
		return nil, err
	}
	var out map[string]Entry
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return out, nil
}

// Save writes entries if they changed: to a new file, synced, then renamed
// over the old one, so that a crash leaves the old positions or the new
// ones, never a mix.
func (f *File) Save(entries map[string]Entry) error {
	if f.last != nil && maps.EqualFunc(f.last, entries, sameEntry) {
		return nil
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing spool positions %s: %w", f.path, err)
	}
	f.last = maps.Clone(entries)
	return nil
}

// Remove deletes the positions: the spool they describe is being consumed.
func (f *File) Remove() error {
	f.last = nil
	if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
