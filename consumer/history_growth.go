package consumer

// A topic that grew: kubewire writes a snapshot's markers to every
// partition its sink knows, so a partition added after a snapshot started
// holds no started marker of it, though every record in it came later.
// Such a partition read from its very first record takes part in the
// snapshot as one that holds its started marker at its start. A partition
// that holds a started marker of an earlier snapshot existed when this one
// started and must hold its marker too; one read from later than its first
// record may have its marker before the read. The order of two snapshots
// is the order of their lists' versions, which kubewire takes one after
// the other from one watch; a marker without one (a restarted kubewire's)
// counts as earlier.
//
// Left open: a snapshot that completed while the partitions' ends were
// being looked up, whose started marker came into a partition just after
// its end was taken, with no earlier snapshot's marker there. Its window
// is then short of that partition's records.

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

// bornAfter says whether partition p holds a started marker only of
// snapshots later than m.
func bornAfter(m *marker, p string, snaps map[string]*marker) bool {
	mine := m.listRV()
	if mine == 0 {
		return false
	}
	for _, x := range snaps {
		if _, ok := x.started[p]; ok && x.listRV() <= mine {
			return false
		}
	}
	return true
}

// listRV is the version of the snapshot's list, 0 if unknown.
func (m *marker) listRV() uint64 {
	if m.startRV != 0 {
		return m.startRV
	}
	return m.completeRV
}
