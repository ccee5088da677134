package consumer

import "strconv"

// olderRV reports whether resourceVersion a is lower than b. docs/events.md
// promises that one key's resourceVersions never decrease; the API servers
// kubewire reads (etcd-backed) use decimal numbers, so they are compared as
// such. Versions that are not both decimal are not compared: the per-key
// order of the broker then decides.
func olderRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}
