package dispatch

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
)

// A spool record is one queued entry: what the dispatcher needs to deliver
// and count it, then the CloudEvent in its JSON form. The event is stored
// rather than the Change because it is what the sink writes, and it can be
// read back without the informer's Resource (which a restarted process may
// not have resolved yet).
//
//	version  byte (1)
//	flags    byte (1 = marker: a snapshot marker or a gap, 2 = marks
//	         follow, 4 = conflated from follows)
//	conflated, size                       uvarint
//	observed (unix nanoseconds)           varint
//	key, op, resource prefix, snapshot id uvarint length + bytes
//	marks (flag 2): count, then (stream, seq) pairs, uvarint
//	conflated from (flag 4)               uvarint length + bytes
//	event                                 the rest, JSON
//
// The marks are the change's place in its watch stream, and those of the
// changes folded into it (informer.Mark.Token): read back by the process
// that wrote them, they let the stream's checkpoint move once the record
// is delivered. A record of an earlier process carries marks that match
// no stream, and none are needed: its process's checkpoint stayed behind
// it.
//
// Conflated from is the resourceVersion of the first change folded into
// the record's (ExtConflatedFrom); a record without it, as an older
// kubewire wrote them, goes out without the extension. A gap's range is not
// stored apart: the event's data holds it, and the Change's Gap is read
// back from there.
const spoolRecordVersion = 1

const (
	flagMarker        = 1
	flagMarks         = 2
	flagConflatedFrom = 4
)

// spoolAttributesBytes is room for an event's attributes and extensions in
// the JSON event format, beyond its data.
const spoolAttributesBytes = 1024

var errBadRecord = errors.New("malformed spool record")

func appendSpoolRecord(b []byte, e *entry, ev *encoding.Event) []byte {
	c := e.item.Change
	var flags byte
	if c.IsMarker() {
		flags |= flagMarker
	}
	marks := e.marks()
	if len(marks) > 0 {
		flags |= flagMarks
	}
	if e.conflatedFrom != "" {
		flags |= flagConflatedFrom
	}
	b = append(b, spoolRecordVersion, flags)
	b = binary.AppendUvarint(b, uint64(e.conflated))
	b = binary.AppendUvarint(b, uint64(max(e.size, 0)))
	b = binary.AppendVarint(b, c.Observed.UnixNano())
	prefix := ""
	if c.Resource != nil {
		prefix = c.Resource.KeyPrefix
	}
	for _, s := range [...]string{c.Key, string(c.Op), prefix, c.SnapshotID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if len(marks) > 0 {
		b = binary.AppendUvarint(b, uint64(len(marks)))
		for _, m := range marks {
			stream, seq := m.Token()
			b = binary.AppendUvarint(binary.AppendUvarint(b, stream), seq)
		}
	}
	if e.conflatedFrom != "" {
		b = binary.AppendUvarint(b, uint64(len(e.conflatedFrom)))
		b = append(b, e.conflatedFrom...)
	}
	// Written in place, after room for the data is made once: a Pod's
	// event is about 12 KB, and growing the record step by step, or
	// copying a separate encoding into it, cost a snapshot that spools
	// about 5% of its CPU.
	b = slices.Grow(b, len(ev.Data())+spoolAttributesBytes)
	return ev.AppendJSON(b)
}

// spoolRecord is a record read back.
type spoolRecord struct {
	marker        bool
	conflated     int
	conflatedFrom string
	size          int64
	observed      time.Time
	key, op       string
	prefix        string
	snapshot      string
	marks         []informer.Mark
	event         *encoding.Event
}

func parseSpoolRecord(b []byte) (*spoolRecord, error) {
	if len(b) < 2 || b[0] != spoolRecordVersion {
		return nil, errBadRecord
	}
	r := &spoolRecord{marker: b[1]&flagMarker != 0}
	hasMarks := b[1]&flagMarks != 0
	hasConflatedFrom := b[1]&flagConflatedFrom != 0
	b = b[2:]
	u := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	r.conflated = int(u())
	// A record read back holds its event, parsed, rather than the object:
	// count what it holds, or a drain fills more memory than the buffer's
	// byte limit says.
	r.size = max(int64(u()), int64(len(b)))
	v, n := binary.Varint(b)
	if n <= 0 {
		return nil, errBadRecord
	}
	b = b[n:]
	r.observed = time.Unix(0, v)
	for _, dst := range [...]*string{&r.key, &r.op, &r.prefix, &r.snapshot} {
		l := u()
		if b == nil || uint64(len(b)) < l {
			return nil, errBadRecord
		}
		*dst = string(b[:l])
		b = b[l:]
	}
	if hasMarks {
		n := u()
		if b == nil || n > uint64(len(b)) {
			return nil, errBadRecord
		}
		for range n {
			stream, seq := u(), u()
			if b == nil {
				return nil, errBadRecord
			}
			if m := informer.MarkOf(stream, seq); m != (informer.Mark{}) {
				r.marks = append(r.marks, m)
			}
		}
	}
	if hasConflatedFrom {
		l := u()
		if b == nil || uint64(len(b)) < l {
			return nil, errBadRecord
		}
		r.conflatedFrom = string(b[:l])
		b = b[l:]
	}
	// The JSON event format: records written by earlier versions, through
	// sdk-go, read back the same.
	var err error
	if r.event, err = encoding.ParseJSON(b); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	return r, nil
}

// item rebuilds the queued item. res returns the one Resource stand-in per
// key prefix, which carries what the dispatcher's metrics need.
func (r *spoolRecord) item(res func(prefix string) *informer.Resource) *Item {
	it := &Item{Change: &informer.Change{
		Op:         informer.Op(r.op),
		Resource:   res(r.prefix),
		Key:        r.key,
		SnapshotID: r.snapshot,
		Observed:   r.observed,
	}, size: r.size, conflated: r.conflated, conflatedFrom: r.conflatedFrom}
	if len(r.marks) > 0 {
		it.Change.Mark, it.folded = r.marks[0], r.marks[1:]
	}
	if it.Change.Op == informer.OpGap {
		var g encoding.Gap
		if err := json.Unmarshal(r.event.Data(), &g); err == nil {
			it.Change.Gap = &informer.Gap{Namespace: g.Namespace, From: g.From, To: g.To, Reason: g.Reason}
		}
	}
	it.once.Do(func() { it.ev = r.event })
	return it
}
