package encoding

import "strings"

// Source is what the source of a kubewire event names: the cluster and the
// resource the event's object belongs to.
type Source struct {
	Cluster, Group, Version, Resource string
}

// ParseSource reads the source of an event of the contract
// (informer.NewResource writes it): /clusters/<cluster>/api/<version>/<resource>
// for the core group, /clusters/<cluster>/apis/<group>/<version>/<resource>
// for the others. It reports false for any other source.
func ParseSource(src string) (Source, bool) {
	parts := strings.Split(strings.TrimPrefix(src, "/"), "/")
	switch {
	case len(parts) == 5 && parts[0] == "clusters" && parts[2] == "api":
		return Source{Cluster: parts[1], Version: parts[3], Resource: parts[4]}, true
	case len(parts) == 6 && parts[0] == "clusters" && parts[2] == "apis":
		return Source{Cluster: parts[1], Group: parts[3], Version: parts[4], Resource: parts[5]}, true
	}
	return Source{}, false
}
