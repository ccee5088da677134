package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/kubewire/kubewire/encoding"
)

// maxChanges is how many changed field paths a row names; the rest are
// counted ("+3 more"), so that one busy update does not fill the screen.
const maxChanges = 3

// maxValue is how many characters of a value a change shows.
const maxValue = 40

// ignoredPaths change with every write and say nothing a row does not
// already say (the RV column), so a diff leaves them out.
var ignoredPaths = []string{"metadata.resourceVersion", "metadata.managedFields", "metadata.generation"}

// changeTracker remembers the last state of each object it was shown, by
// partition key, so that an update can be told as the fields it changed.
// It holds one decoded object per key: the memory of a View without its
// index.
type changeTracker struct {
	last map[string]map[string]string
}

func newChangeTracker() *changeTracker {
	return &changeTracker{last: map[string]map[string]string{}}
}

// observe records ev's object and returns, for an update whose previous
// state it saw, the first changed field paths as "path: old → new".
func (c *changeTracker) observe(ev *event.Event) []string {
	key, _ := ev.Extensions()[encoding.ExtPartitionKey].(string)
	typ := shortType(ev.Type())
	if key == "" || !slices.Contains([]string{"added", "updated", "deleted", "synced"}, typ) {
		return nil
	}
	if typ == "deleted" {
		delete(c.last, key)
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(ev.Data(), &obj); err != nil {
		// A reference payload or data that is not an object: nothing to
		// compare with next time.
		delete(c.last, key)
		return nil
	}
	if _, ok := obj["metadata"]; !ok {
		delete(c.last, key)
		return nil
	}
	now := map[string]string{}
	flatten("", obj, now)
	before, seen := c.last[key]
	c.last[key] = now
	if typ != "updated" || !seen {
		return nil
	}
	return diff(before, now)
}

// flatten writes every leaf of v as path → short JSON text; a list is one
// leaf, because a list's index says little to a person.
func flatten(path string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, child := range m {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, child, out)
		}
		return
	}
	if slices.Contains(ignoredPaths, path) {
		return
	}
	out[path] = shortValue(v)
}

func shortValue(v any) string {
	var s string
	if str, ok := v.(string); ok {
		s = str
	} else {
		b, _ := json.Marshal(v)
		s = string(b)
	}
	s = strings.ReplaceAll(s, "\n", `\n`)
	if r := []rune(s); len(r) > maxValue {
		s = string(r[:maxValue-1]) + "…"
	}
	return s
}

// diff lists the paths whose values differ, sorted, the first maxChanges
// as "path: old → new" ("-" for absent) and a count of the rest.
func diff(before, now map[string]string) []string {
	paths := slices.Collect(maps.Keys(now))
	for p := range before {
		if _, ok := now[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []string
	n := 0
	for _, p := range paths {
		old, hadOld := before[p]
		nw, hasNew := now[p]
		if hadOld == hasNew && old == nw {
			continue
		}
		n++
		if len(out) == maxChanges {
			continue
		}
		if !hadOld {
			old = "-"
		}
		if !hasNew {
			nw = "-"
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", p, old, nw))
	}
	if n > len(out) {
		out = append(out, fmt.Sprintf("+%d more", n-len(out)))
	}
	return out
}

// PrintChanges reads structured-mode CloudEvents, one JSON object per line
// as the stdout sink writes them, and prints them as `kubewire tail` does:
// a header, then a row per event with what changed. Lines that are not
// events are copied through. It returns when r ends.
func PrintChanges(r io.Reader, w io.Writer) error {
	p := &tailPrinter{out: w, errOut: w, format: "table", filter: &tailFilter{}, done: func() {}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		var ev event.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type() == "" {
			p.write(w, sc.Text()+"\n")
			continue
		}
		p.event(&ev, "")
		if p.err != nil {
			return p.err
		}
	}
	return sc.Err()
}
