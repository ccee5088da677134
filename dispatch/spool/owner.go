package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ErrOwner is returned when a spool directory was written for another
// cluster or sink.
var ErrOwner = errors.New("spool directory belongs to another cluster or sink")

// OwnerFile is the owner record's file name in a sink's spool directory.
const OwnerFile = "owner.json"

// ownerFormat is the version of the owner record's layout, for a later
// kubewire that changes it.
const ownerFormat = 1

// Owner names whose events a spool holds. Cluster and Sink decide whether a
// process may replay the spool; Type is for the operator who reads the
// record.
type Owner struct {
	Cluster string `json:"cluster"`
	Sink    string `json:"sink"`
	Type    string `json:"type,omitempty"`
}

func (o Owner) String() string {
	s := fmt.Sprintf("cluster %q, sink %q", o.Cluster, o.Sink)
	if o.Type != "" {
		s += " (" + o.Type + ")"
	}
	return s
}

type ownerRecord struct {
	Format int `json:"format"`
	Owner
	Created time.Time `json:"created"`
}

// Claim makes sure the spool in dir holds o's events, so that they are never
// delivered to another cluster's or sink's broker. A directory without a
// record is o's: a new spool, or one an older kubewire left, which wrote
// none. It writes the record then, and reports adopted when the directory
// already held something. A record naming another cluster or sink is an
// error wrapping ErrOwner; the caller must hold the directory's lock.
func Claim(dir string, o Owner) (adopted bool, err error) {
	path := filepath.Join(dir, OwnerFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		adopted, err = holdsSpool(dir)
		if err != nil {
			return false, err
		}
		return adopted, writeOwner(path, ownerRecord{Format: ownerFormat, Owner: o, Created: time.Now().UTC()})
	case err != nil:
		return false, fmt.Errorf("spool owner record: %w", err)
	}
	var rec ownerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return false, fmt.Errorf("spool owner record %s cannot be read (%w); move the directory aside, or remove the file if the spool is this sink's", path, err)
	}
	if rec.Cluster != o.Cluster || rec.Sink != o.Sink {
		return false, fmt.Errorf("%w: %s holds the events of %s, not of this %s, and they are not delivered here; "+
			"to deliver them, run the kubewire of that cluster and sink on this directory; "+
			"to start this one, move the directory aside or point dispatch.spoolDir elsewhere", ErrOwner, dir, rec.Owner, o)
	}
	if rec.Type != o.Type {
		// Same cluster and sink with another broker type: its events are
		// still this sink's, and the record should say what writes it now.
		rec.Type = o.Type
		return false, writeOwner(path, rec)
	}
	return false, nil
}

// holdsSpool reports whether dir holds anything besides the lock.
func holdsSpool(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("spool directory: %w", err)
	}
	for _, e := range entries {
		if e.Name() != LockFile {
			return true, nil
		}
	}
	return false, nil
}

// writeOwner writes the record whole or not at all: a torn record would
// stop the next start.
func writeOwner(path string, rec ownerRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool owner record: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("spool owner record: %w", err)
	}
	return nil
}
