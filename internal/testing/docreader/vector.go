package docreader

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Step is one line of a vector: a record, or a hand-over of a partition.
type Step struct {
	Record   Record
	Handover string // when not "", partition Handover is handed over here
}

// ParseVector reads a vector's stream in the format of
// testdata/consumer-vectors/README.md: a bare CloudEvent is read from p0 at
// its next position; {"partition", "offset", "event"} and
// {"partition", "offset", "tombstone"} give theirs; {"handover": P} hands
// P over.
func ParseVector(in io.Reader) ([]Step, error) {
	var steps []Step
	// nextP0 is the position a bare line takes: p0's next position, after
	// the highest one given so far.
	var nextP0 uint64
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for line := 0; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var probe struct {
			Partition *string         `json:"partition"`
			Offset    *uint64         `json:"offset"`
			Event     json.RawMessage `json:"event"`
			Tombstone *string         `json:"tombstone"`
			Handover  *string         `json:"handover"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			// Not JSON: still a record of p0, which step 1 reports.
			steps = append(steps, Step{Record: Record{Partition: "p0", Offset: nextP0, Event: bytes.Clone(b)}})
			nextP0++
			continue
		}
		switch {
		case probe.Handover != nil:
			steps = append(steps, Step{Handover: *probe.Handover})
		case probe.Partition != nil && probe.Offset != nil && probe.Tombstone != nil:
			steps = append(steps, Step{Record: Record{Partition: *probe.Partition, Offset: *probe.Offset, Tombstone: *probe.Tombstone}})
		case probe.Partition != nil && probe.Offset != nil && probe.Event != nil:
			steps = append(steps, Step{Record: Record{Partition: *probe.Partition, Offset: *probe.Offset, Event: bytes.Clone(probe.Event)}})
		case probe.Partition != nil || probe.Offset != nil:
			return nil, fmt.Errorf("line %d: a record with a partition needs an offset and an event or a tombstone", line)
		default:
			steps = append(steps, Step{Record: Record{Partition: "p0", Offset: nextP0, Event: bytes.Clone(b)}})
		}
		if s := steps[len(steps)-1]; s.Handover == "" && s.Record.Partition == "p0" && s.Record.Offset >= nextP0 {
			nextP0 = s.Record.Offset + 1
		}
	}
	return steps, sc.Err()
}

// Replay applies a vector's steps the way the README describes: records of
// a partition that is handed over later are read, until the hand-over, by
// a member of their own (a Reader that reads only that partition); at the
// hand-over the returned Reader takes the member's state of it and reads
// the partition's later records itself.
func Replay(steps []Step) *Reader {
	handedAt := map[string]int{}
	for i, s := range steps {
		if s.Handover != "" {
			if _, ok := handedAt[s.Handover]; !ok {
				handedAt[s.Handover] = i
			}
		}
	}
	r := New()
	members := map[string]*Reader{}
	for i, s := range steps {
		if s.Handover != "" {
			if m, ok := members[s.Handover]; ok {
				r.TakeOver(s.Handover, m)
				delete(members, s.Handover)
			} else {
				r.TakeOver(s.Handover, New())
			}
			continue
		}
		P := s.Record.Partition
		if at, ok := handedAt[P]; ok && i < at {
			if members[P] == nil {
				members[P] = New()
			}
			members[P].Read(s.Record)
			continue
		}
		r.Read(s.Record)
	}
	return r
}
