package spool

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// go-diskqueue keeps a segment's read position in its metadata file, which
// it rewrites only when it syncs: once a second with fsync: interval. A
// process killed between two syncs leaves a position behind what it read,
// and the next start read those records again and delivered them a second
// time, after newer events of their keys: a key's versions went backwards.
// So the spool keeps a cursor of its own per segment, rewritten in place
// after every record it hands out, and repair takes the later of the two.
// The write goes to the page cache, not to the disk: it survives the
// process, as the data files do, and costs one small write per record read.

// position is a place in a segment's data files.
type position struct{ file, pos int64 }

func (p position) after(q position) bool {
	return p.file > q.file || p.file == q.file && p.pos > q.pos
}

func cursorPath(dir, name string) string {
	return filepath.Join(dir, name+".diskqueue.cursor")
}

// A cursor file holds the file number, the offset and a CRC-32 of both, so
// that a torn write reads as no cursor rather than a wrong one.
const cursorLen = 8 + 8 + 4

func encodeCursor(b *[cursorLen]byte, p position) {
	binary.BigEndian.PutUint64(b[0:], uint64(p.file))
	binary.BigEndian.PutUint64(b[8:], uint64(p.pos))
	binary.BigEndian.PutUint32(b[16:], crc32.ChecksumIEEE(b[:16]))
}

// readCursor returns the cursor of segment name, if it has a valid one.
func readCursor(dir, name string) (position, bool) {
	b, err := os.ReadFile(cursorPath(dir, name))
	if err != nil || len(b) != cursorLen || crc32.ChecksumIEEE(b[:16]) != binary.BigEndian.Uint32(b[16:]) {
		return position{}, false
	}
	return position{int64(binary.BigEndian.Uint64(b[0:])), int64(binary.BigEndian.Uint64(b[8:]))}, true
}

// removeBefore deletes the data files of segment name numbered below file.
func removeBefore(dir, name string, file int64) {
	files, _ := filepath.Glob(filepath.Join(dir, name+".diskqueue.*.dat"))
	for _, f := range files {
		s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), name+".diskqueue."), ".dat")
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n < file {
			_ = os.Remove(f)
		}
	}
}

// reader follows where the library reads in a segment's files, from the
// records it hands out: a record lies in the current file unless that file
// has been read to its end and a later one exists. The library never hands
// out an empty file's worth, so one step to the next number is enough; a
// file it gave up (see bad.go) is gone, which reads the same as read whole.
type reader struct {
	dir, name string
	at        position
	size      int64 // of file at.file when last looked at
	f         *os.File
	buf       [cursorLen]byte
}

func (r *reader) open(dir, name string, at position) error {
	f, err := os.OpenFile(cursorPath(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("spool cursor: %w", err)
	}
	*r = reader{dir: dir, name: name, at: at, f: f}
	r.size = r.fileSize(at.file)
	return nil
}

func (r *reader) fileSize(n int64) int64 {
	fi, err := os.Stat(dataPath(r.dir, r.name, n))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// took records that the library handed out a record of n bytes, and saves
// the position after it.
func (r *reader) took(n int) error {
	if r.at.pos >= r.size {
		r.size = r.fileSize(r.at.file) // it may have grown
		if r.at.pos >= r.size && r.at.pos > 0 {
			r.at = position{r.at.file + 1, 0}
			r.size = r.fileSize(r.at.file)
		}
	}
	r.at.pos += 4 + int64(n)
	encodeCursor(&r.buf, r.at)
	_, err := r.f.WriteAt(r.buf[:], 0)
	return err
}

// close closes the cursor file; remove also deletes it, with its segment.
func (r *reader) close(remove bool) {
	if r.f == nil {
		return
	}
	_ = r.f.Close()
	r.f = nil
	if remove {
		_ = os.Remove(cursorPath(r.dir, r.name))
	}
}
