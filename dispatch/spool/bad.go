package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	diskqueue "github.com/nsqio/go-diskqueue"
)

// go-diskqueue gives up a data file it cannot read by renaming it to
// <file>.bad and reading on from the next file. It never deletes the .bad
// file, so each one is disk outside the spool's bound, for good.
//
// Most of them are not corrupt at all. The library reads the write file while
// it is being written; when the reader takes the file's last record just
// before the writer rolls to the next file, the reader is left at the old
// file's end without having rolled with it, and its next read there is EOF.
// That file was read whole. On a long outage this happened at every roll and
// filled a node's disk with 64 MiB .bad files while the spool's own count
// stayed at its bound.
//
// So the spool watches the library's log: a read error that is EOF at the
// very end of the file marks the file as read whole, and when the library
// then announces the rename, the spool deletes the file first (the rename
// then fails, which the library only logs). A real read error (a corrupt
// length, say) is logged once, counted through Options.OnCorrupt and the file
// removed the same way: its remaining records cannot be found again, and
// keeping it would only leak the disk.

// The library's messages that the spool acts on (go-diskqueue v1.1.0).
const (
	dqReadError  = "DISKQUEUE(%s) reading at %d of %s - %s"
	dqBadFile    = "DISKQUEUE(%s) jump to next file and saving bad file as %s"
	dqRenameFail = "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s"
)

// logf is the library's logger for segment g. It runs on the library's
// goroutine, before the library acts on what it reports.
func (g *segment) logf(s *Spool) diskqueue.AppLogFunc {
	return func(lvl diskqueue.LogLevel, f string, args ...any) {
		switch {
		case f == dqReadError && len(args) == 4:
			g.readEnd = readWhole(args[1], args[2], args[3])
			if g.readEnd {
				return
			}
		case f == dqBadFile && len(args) == 2:
			bad, _ := args[1].(string)
			s.giveUp(strings.TrimSuffix(bad, ".bad"), !g.readEnd)
			g.readEnd = false
			return
		case f == dqRenameFail:
			return // the file was removed by giveUp
		}
		switch lvl {
		case diskqueue.ERROR, diskqueue.FATAL:
			s.log.Error("spool: "+fmt.Sprintf(f, args...), "dir", s.opt.Dir)
		case diskqueue.WARN:
			s.log.Warn("spool: "+fmt.Sprintf(f, args...), "dir", s.opt.Dir)
		}
	}
}

// readWhole reports whether a read error at pos of file is the end of a
// file whose every byte was read.
func readWhole(pos, file, err any) bool {
	p, ok1 := pos.(int64)
	name, ok2 := file.(string)
	e, ok3 := err.(error)
	if !ok1 || !ok2 || !ok3 || !errors.Is(e, io.EOF) {
		return false
	}
	st, serr := os.Stat(name)
	return serr == nil && st.Size() == p
}

// giveUp removes a data file the library is done with. corrupt says it held
// records that could not be read.
func (s *Spool) giveUp(file string, corrupt bool) {
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("spool: cannot remove a data file the spool gave up", "file", file, "err", err)
	}
	if !corrupt {
		return
	}
	s.log.Error("spool: a data file could not be read and was removed; the events it still held are lost",
		"file", filepath.Base(file), "dir", s.opt.Dir)
	if s.opt.OnCorrupt != nil {
		s.opt.OnCorrupt()
	}
}

// removeBad deletes the .bad files an earlier kubewire left in dir, which
// nothing reads: they are disk outside the bound.
func (s *Spool) removeBad() {
	bad, _ := filepath.Glob(filepath.Join(s.opt.Dir, "*.bad"))
	for _, f := range bad {
		if err := os.Remove(f); err != nil {
			s.log.Error("spool: cannot remove a data file an earlier run gave up", "file", f, "err", err)
			continue
		}
		s.log.Warn("spool: removed a data file an earlier run gave up as unreadable", "file", filepath.Base(f))
	}
}
