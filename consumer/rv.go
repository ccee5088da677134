package consumer

import (
	"fmt"
	"strconv"
)

// version reads a resourceVersion, or a gap's from or to. docs/events.md
// says what one is: a decimal unsigned integer, etcd's revision. A record
// whose version is anything else breaks the contract, and the View reports
// it rather than hold a version it cannot order.
func version(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal unsigned integer (etcd's revision)", s)
	}
	return n, nil
}

// olderRV reports whether resourceVersion a is lower than b. docs/events.md
// promises that one key's resourceVersions never decrease, gaps apart. The
// View holds only versions version reads; a state saved by an older View
// may hold others, which are not compared: the per-key order of the broker
// then decides.
func olderRV(a, b string) bool {
	x, err1 := version(a)
	y, err2 := version(b)
	return err1 == nil && err2 == nil && x < y
}
