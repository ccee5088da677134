package docreader

// TakeOver makes r take partition P from m, the member of the consumer
// group that read it until now ("A partition handed over"): m's entries,
// its windows and done of P, and next[P]. The gaps and problems m reported
// stay m's own. For a key both hold, the entry with the higher version
// stays, a delete (gone) counting as a version. On a tie r's own entry
// stays, but: if both are held and m's has a sid, (sid, P) is added to
// r's entry's listed; and if r's is gone by a prune, m's held one is
// taken.
//
// The rule renumbers the `seq`s of P's windows and done "after the
// consumer's own in their order". It does not say what becomes of the
// seqs an entry of the saved state carries (seen, forgot, pruned), which
// count the other member's records; this reader renumbers them the same
// way (each non-zero value of m is added to r's seq, and r's seq then
// advances by m's), which keeps their order against P's windows, the only
// order the steps compare for entries of P.
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
	for w, d := range m.done {
		if w.partition == P {
			if d.hasStart {
				d.start = shift(d.start)
			}
			r.done[w] = d
		}
	}
	// "its entries": the member read only P, so all its entries are P's.
	for k, theirs := range m.entries {
		ours, ok := r.entries[k]
		if ok && theirs.version < ours.version {
			continue
		}
		if ok && theirs.version == ours.version {
			switch {
			case ours.held && theirs.held && theirs.sid != nil:
				ours.addListed(listing{*theirs.sid, P})
				continue
			case !ours.held && ours.pruned > 0 && theirs.held:
				// take the saved held one, below
			default:
				continue
			}
		}
		c := *theirs
		c.listed = append([]listing(nil), theirs.listed...)
		c.seen, c.forgot, c.pruned = shift(c.seen), shift(c.forgot), shift(c.pruned)
		r.entries[k] = &c
	}
}
