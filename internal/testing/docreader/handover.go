package docreader

// TakeOver makes r take partition P from m, the member of the consumer
// group that read it until now ("A partition handed over"): m's entries,
// its windows and done of P, and next[P]. For a key both hold, the entry
// with the higher version stays, a delete (gone) counting as a version;
// on a tie r's own entry stays. The problems m reported are carried over.
//
// The document does not say how the member's `seq` values (an entry's
// seen, forgot and pruned, a window's start) relate to r's: they count
// another consumer's records. This reader moves them after r's own (each
// non-zero value of m is added to r's seq, and r's seq then advances by
// m's), which keeps their order among themselves, the only order the
// steps compare for entries of P against windows of P.
func (r *Reader) TakeOver(P string, m *Reader) {
	base := r.seq
	shift := func(x uint64) uint64 {
		if x == 0 {
			return 0
		}
		return x + base
	}
	r.seq += m.seq

	if n, ok := m.next[P]; ok {
		r.next[P] = n
	}
	for w, o := range m.open {
		if w.partition == P {
			r.open[w] = openWindow{resource: o.resource, start: shift(o.start)}
		}
	}
	for w := range m.done {
		if w.partition == P {
			r.done[w] = true
		}
	}
	for id := range m.gaps {
		r.gaps[id] = true
	}
	// "its entries": the member read only P, so all its entries are P's.
	for k, theirs := range m.entries {
		ours, ok := r.entries[k]
		if ok && theirs.version <= ours.version {
			continue
		}
		c := *theirs
		c.seen, c.forgot, c.pruned = shift(c.seen), shift(c.forgot), shift(c.pruned)
		r.entries[k] = &c
	}
	r.problems = append(r.problems, m.problems...)
}
