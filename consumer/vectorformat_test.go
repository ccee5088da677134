package consumer_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/consumer"
)

// vline is one line of a vector: a record read from a partition at a
// position (an event, or a Kafka tombstone of a key), or the hand-over of
// a partition from another member of the group. The format is in
// testdata/consumer-vectors/README.md.
type vline struct {
	Partition string          `json:"partition,omitempty"`
	Offset    *int64          `json:"offset,omitempty"`
	Event     json.RawMessage `json:"event,omitempty"`
	Tombstone string          `json:"tombstone,omitempty"`
	Handover  string          `json:"handover,omitempty"`

	ev *event.Event
	// restart, in generated streams only, saves the consumer's state and
	// loads it into a new consumer that reads on. Vectors leave it out:
	// by the rule, a restart from a saved state changes nothing.
	restart bool
}

const firstPartition = "p0"

// linesOf places a generated stream's records: each at its partition's
// next position, or, read again, at the position it was first read at.
func linesOf(s []rec) []vline {
	next := map[string]int64{}
	out := make([]vline, 0, len(s))
	for _, r := range s {
		part := r.Part
		if part == "" {
			part = firstPartition
		}
		switch r.Type {
		case tHandover:
			out = append(out, vline{Handover: part})
			continue
		case tRestart:
			out = append(out, vline{restart: true})
			continue
		}
		off := next[part]
		if r.Reread {
			off = r.At
		} else {
			next[part]++
		}
		l := vline{Partition: part, Offset: &off}
		if r.Type == tTombstone {
			l.Tombstone = r.Key
		} else {
			l.ev = r.event()
		}
		out = append(out, l)
	}
	return out
}

// simple reports whether a stream is of the first format: one partition,
// each record read once, in order, so that a line is a bare CloudEvent
// and its number is its position.
func simple(ls []vline) bool {
	i := 0
	for _, l := range ls {
		if l.restart {
			continue
		}
		if l.Handover != "" || l.Tombstone != "" || l.Partition != firstPartition || *l.Offset != int64(i) {
			return false
		}
		i++
	}
	return true
}

// encodeLines writes ls in the first format when it can, so that
// runners of one partition (the Python example) read it.
func encodeLines(ls []vline) ([]byte, error) {
	var b bytes.Buffer
	bare := simple(ls)
	for _, l := range ls {
		if l.restart {
			continue
		}
		if l.ev != nil {
			j, err := json.Marshal(l.ev)
			if err != nil {
				return nil, err
			}
			if bare {
				b.Write(j)
				b.WriteByte('\n')
				continue
			}
			l.Event = j
		}
		j, err := json.Marshal(l)
		if err != nil {
			return nil, err
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// decodeLines reads a vector's stream in either format.
func decodeLines(raw []byte) ([]vline, error) {
	var out []vline
	next := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var l vline
		if _, ok := probe["specversion"]; ok {
			l.Event = append(json.RawMessage(nil), line...)
		} else if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if l.Handover != "" {
			out = append(out, l)
			continue
		}
		if l.Partition == "" {
			l.Partition = firstPartition
		}
		if l.Offset == nil {
			o := next[l.Partition]
			l.Offset = &o
		}
		if *l.Offset >= next[l.Partition] {
			next[l.Partition] = *l.Offset + 1
		}
		if l.Event != nil {
			e := event.New()
			if err := json.Unmarshal(l.Event, &e); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			l.ev = &e
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// play feeds ls to a consumer's View. A partition with a hand-over line
// is read, before it, by another member of the group (a View of its own,
// reading only that partition); at the line, the consumer adopts that
// member's state of the partition and reads the partition's later lines.
func play(ls []vline, opt consumer.Options) (*consumer.View, error) {
	v := consumer.NewView(opt)
	others := map[string]*consumer.View{}
	for _, l := range ls {
		if l.Handover != "" {
			others[l.Handover] = consumer.NewView(consumer.Options{})
		}
	}
	for _, l := range ls {
		if l.restart {
			var b bytes.Buffer
			if err := v.SaveState(&b); err != nil {
				return nil, err
			}
			v = consumer.NewView(opt)
			if err := v.LoadState(&b); err != nil {
				return nil, err
			}
			continue
		}
		if l.Handover != "" {
			m := others[l.Handover]
			delete(others, l.Handover)
			state, err := m.StateOf(l.Handover)
			if err != nil {
				return nil, err
			}
			if err := v.Adopt(l.Handover, state); err != nil {
				return nil, err
			}
			continue
		}
		reader := v
		if m, ok := others[l.Partition]; ok {
			reader = m
		}
		pos := consumer.Position{Partition: l.Partition, Offset: *l.Offset}
		if l.ev == nil {
			reader.Tombstone(pos, l.Tombstone)
			continue
		}
		reader.Apply(pos, l.ev)
	}
	return v, nil
}

// heldBy is what v holds, in the form of the vectors' .json files.
func heldBy(v *consumer.View) []heldObject {
	out := []heldObject{}
	for _, o := range v.Objects("") {
		out = append(out, heldObject{Key: o.Key, UID: o.UID, ResourceVersion: o.ResourceVersion})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
