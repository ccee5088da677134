package consumer

// A topic that grew: kubewire writes a snapshot's markers to every
// partition its sink knows, so a partition added after a snapshot started
// holds no started marker of it, though every record in it came later.
// Such a partition takes part in the snapshot as one that holds its
// started marker at its start, when the scan read it from its very first
// record and found there started markers of later snapshots only, and at
// least one. A partition that holds a started marker of an earlier
// snapshot existed when this one started and must hold its marker too; one
// read from later than its first record may have its marker before the
// read. Asking for a later snapshot's marker rules out a partition whose
// end was looked up just before the snapshot's started marker reached it
// (the snapshot completing elsewhere before the other ends were taken):
// nothing after that marker is read there, so no later one either. From
// a growth until the next snapshot starts, every point is therefore
// refused as having no complete snapshot (ErrNoSnapshot): the added
// partitions hold nothing yet that places them. The order of two
// snapshots is the order of their lists' versions, which kubewire takes
// one after the other from one watch; a marker without one (a restarted
// kubewire's) counts as earlier.

// spans says whether snapshot m's window is known in every partition that
// start names: its started marker was read there, or the partition began
// after m started.
func spans(m *marker, start Positions, snaps map[string]*marker) bool {
	for p, from := range start {
		if _, ok := m.started[p]; ok {
			continue
		}
		if from != 0 || !bornAfter(m, p, snaps) {
			return false
		}
	}
	return true
}

// bornAfter says whether partition p holds started markers only of
// snapshots later than m, and at least one.
func bornAfter(m *marker, p string, snaps map[string]*marker) bool {
	mine := m.listRV()
	if mine == 0 {
		return false
	}
	later := false
	for _, x := range snaps {
		if _, ok := x.started[p]; ok {
			if x.listRV() <= mine {
				return false
			}
			later = true
		}
	}
	return later
}

// listRV is the version of the snapshot's list, 0 if unknown.
func (m *marker) listRV() uint64 {
	if m.startRV != 0 {
		return m.startRV
	}
	return m.completeRV
}
