package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// go-diskqueue keeps a segment's read and write positions and its depth in
// a metadata file that it rewrites only when it syncs (once a second with
// fsync: interval). After kubewire is killed, that file can lag the data
// files: the depth is too low, the write position short of the file's end,
// or, killed before the first sync, the file is missing. The library then
// starts a new data file and salvages the old one's tail as it reads, but
// its depth is wrong, and the spool relies on depth to know when it has been
// read to the end (only then may new events skip it). So before a segment is
// opened, its metadata is recomputed from the data files: every complete
// record from the read position on is counted, a record cut short by the
// kill is cut off, and the write position is the end of the last file.
//
// The data file format is the library's: records of a 4-byte big-endian
// length followed by that many bytes, in files numbered from 0.

type segmentMeta struct {
	depth                  int64
	readFileNum, readPos   int64
	writeFileNum, writePos int64
}

func metaPath(dir, name string) string {
	return filepath.Join(dir, name+".diskqueue.meta.dat")
}

func dataPath(dir, name string, n int64) string {
	return filepath.Join(dir, fmt.Sprintf("%s.diskqueue.%06d.dat", name, n))
}

// segmentNames lists the segments in dir by generation, whether or not their
// metadata file exists.
func segmentNames(dir string) ([]int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "seg-*.diskqueue.*"))
	if err != nil {
		return nil, err
	}
	var gens []int64
	for _, f := range files {
		base := filepath.Base(f)
		name, _, ok := strings.Cut(base, ".diskqueue.")
		if !ok || strings.HasSuffix(base, ".tmp") || strings.HasSuffix(base, ".bad") {
			continue
		}
		g, err := strconv.ParseInt(strings.TrimPrefix(name, "seg-"), 10, 64)
		if err != nil || slices.Contains(gens, g) {
			continue
		}
		gens = append(gens, g)
	}
	slices.Sort(gens)
	return gens, nil
}

// repairSegment rewrites the metadata of segment name in dir to match its
// data files, and returns the bytes of its unread records (with their
// length prefixes), the read position it settled on, and whether it cut off
// a record that was not whole. The read position is the later of the
// library's and the spool's own cursor (cursor.go).
func repairSegment(dir, name string) (unread int64, at position, cut bool, err error) {
	var m segmentMeta
	if b, err := os.ReadFile(metaPath(dir, name)); err == nil {
		if _, err := fmt.Sscanf(string(b), "%d\n%d,%d\n%d,%d\n", &m.depth, &m.readFileNum, &m.readPos, &m.writeFileNum, &m.writePos); err != nil {
			return 0, at, false, fmt.Errorf("spool segment %s: metadata: %w", name, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, at, false, err
	}
	if c, ok := readCursor(dir, name); ok && c.after(position{m.readFileNum, m.readPos}) {
		m.readFileNum, m.readPos = c.file, c.pos
	}
	// Files before the read position were read whole; the library removes
	// a file only as its reader leaves it, so one the cursor passed may be
	// left behind.
	removeBefore(dir, name, m.readFileNum)
	var nums []int64
	files, _ := filepath.Glob(filepath.Join(dir, name+".diskqueue.*.dat"))
	for _, f := range files {
		s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), name+".diskqueue."), ".dat")
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= m.readFileNum {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	if len(nums) > 0 && nums[0] > m.readFileNum {
		// Read to the end of a file the library had already removed.
		m.readFileNum, m.readPos = nums[0], 0
	}
	m.depth = 0
	m.writeFileNum, m.writePos = m.readFileNum, m.readPos
	for i, n := range nums {
		from := int64(0)
		if n == m.readFileNum {
			from = m.readPos
		}
		count, end, size, err := countRecords(dataPath(dir, name, n), from)
		if err != nil {
			return 0, at, false, fmt.Errorf("spool segment %s: %w", name, err)
		}
		if i == len(nums)-1 {
			// The tail of the last file may be a record cut short by the
			// kill; it was never acknowledged as spooled, so drop it.
			if cut = size > end; cut {
				if err := os.Truncate(dataPath(dir, name, n), end); err != nil {
					return 0, at, false, err
				}
			}
		}
		m.depth += count
		unread += end - from
		m.writeFileNum, m.writePos = n, end
	}
	tmp := metaPath(dir, name) + ".repair.tmp"
	data := fmt.Sprintf("%d\n%d,%d\n%d,%d\n", m.depth, m.readFileNum, m.readPos, m.writeFileNum, m.writePos)
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return 0, at, false, err
	}
	return unread, position{m.readFileNum, m.readPos}, cut, os.Rename(tmp, metaPath(dir, name))
}

// countRecords counts the complete records of a data file from offset from,
// and returns the offset just past the last one, and the file's size.
func countRecords(path string, from int64) (count, end, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	size = fi.Size()
	end = from
	var hdr [4]byte
	for end+4 <= size {
		if _, err := f.ReadAt(hdr[:], end); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, 0, err
		}
		n := int64(binary.BigEndian.Uint32(hdr[:]))
		if n < 1 || n > spoolMaxRecord || end+4+n > size {
			break
		}
		end += 4 + n
		count++
	}
	return count, end, size, nil
}
