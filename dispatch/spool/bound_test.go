package spool

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
)

// diskUse is the size of every file in dir, whatever the spool thinks of it.
func diskUse(t *testing.T, dir string) (total int64, bad int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			total += info.Size()
		}
		if strings.HasSuffix(e.Name(), ".bad") {
			bad++
		}
	}
	return total, bad
}

func record(i int, size int) []byte {
	b := bytes.Repeat([]byte{'x'}, size)
	binary.BigEndian.PutUint32(b, uint32(i))
	return b
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A spool that is written while it drains rolls from file to file. Its disk
// must stay within maxBytes plus one file at every moment, .bad files
// included, and every record must come out once and in order.
func TestASpoolThatRollsWhileItDrainsStaysWithinItsBoundOnDisk(t *testing.T) {
	const (
		maxBytes = MinBytes
		recSize  = 4 << 10
		records  = 8 * maxBytes / recSize // eight times the bound in all
	)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, MaxBytes: maxBytes, Fsync: config.FsyncNever}, quiet(), new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	read := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range records {
			rec, err := s.Next(ctx)
			if err != nil {
				read <- err
				return
			}
			if got := int(binary.BigEndian.Uint32(rec)); got != i {
				t.Errorf("record %d came out as record %d", i, got)
			}
		}
		read <- nil
	}()

	// A file is on disk until it has been read whole, so the bound is
	// maxBytes plus one file; a small spool must have small files for
	// that to mean anything.
	for _, m := range []int64{MinBytes, 64 << 20, 1 << 30, 1 << 40} {
		if f := FileBytes(m); f > m/16 {
			t.Errorf("a spool of %d bytes rolls its files at %d bytes, more than a sixteenth of it", m, f)
		}
	}
	bound := int64(maxBytes) + FileBytes(maxBytes) + recSize + 4
	var worst int64
	badSeen := 0
	deadline := time.Now().Add(time.Minute)
	for i := 0; i < records; {
		if time.Now().After(deadline) {
			t.Fatalf("wrote %d of %d records within a minute", i, records)
		}
		// As the dispatcher does, write only while the spool has room.
		if s.Full() {
			select {
			case err := <-read:
				t.Fatalf("the reader stopped early: %v", err)
			case <-time.After(time.Millisecond):
			}
			continue
		}
		if err := s.Put(record(i, recSize)); err != nil {
			t.Fatal(err)
		}
		i++
		use, bad := diskUse(t, dir)
		worst, badSeen = max(worst, use), max(badSeen, bad)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	use, bad := diskUse(t, dir)
	worst, badSeen = max(worst, use), max(badSeen, bad)
	if worst > bound {
		t.Errorf("the spool used %d bytes of disk; the bound is maxBytes %d plus one file %d (%d)", worst, int64(maxBytes), FileBytes(maxBytes), bound)
	}
	if badSeen > 0 {
		t.Errorf("%d .bad files were left in the spool directory", badSeen)
	}
	t.Logf("%d records of %d bytes through a %d-byte spool: at most %d bytes on disk (bound %d)", records, recSize, maxBytes, worst, bound)
}

// A data file whose records cannot be read any more is counted once,
// logged, and removed: it must not stay on disk outside the bound.
func TestACorruptDataFileIsCountedAndRemoved(t *testing.T) {
	const (
		maxBytes = MinBytes
		recSize  = 4 << 10
	)
	dir := t.TempDir()
	var corrupt atomic.Int64
	opt := Options{Dir: dir, MaxBytes: maxBytes, Fsync: config.FsyncAlways, OnCorrupt: func() { corrupt.Add(1) }}
	s, err := Open(opt, quiet(), new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	// Three files' worth, then a length prefix in the middle file made
	// impossible, while nothing has been read yet.
	n := int(3 * FileBytes(maxBytes) / (recSize + 4))
	for i := range n {
		if err := s.Put(record(i, recSize)); err != nil {
			t.Fatal(err)
		}
	}
	middle := filepath.Join(dir, "seg-1099511627776.diskqueue.000001.dat")
	f, err := os.OpenFile(middle, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := -1
	for s.Depth() > 0 {
		rec, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("after record %d: %v", last, err)
		}
		got := int(binary.BigEndian.Uint32(rec))
		if got <= last {
			t.Fatalf("record %d came out after record %d", got, last)
		}
		last = got
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if last != n-1 {
		t.Errorf("the last record read was %d, want %d: the records after the corrupt file were lost too", last, n-1)
	}
	if c := corrupt.Load(); c != 1 {
		t.Errorf("OnCorrupt was called %d times, want once", c)
	}
	if _, bad := diskUse(t, dir); bad > 0 {
		t.Errorf("%d .bad files were left in the spool directory", bad)
	}
	if _, err := os.Stat(middle); !os.IsNotExist(err) {
		t.Errorf("the corrupt file is still there: %v", err)
	}
}
