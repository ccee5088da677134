// Command inside reports, from inside a container, who it runs as and
// which directories it can write to, as JSON. The node cluster's kubewire
// image carries it next to /kubewire, and tests run it with an exec into
// the kubewire container: an exec'd process gets the container's user,
// mounts and security context, so what it can write is what kubewire can.
//
// It tries to create a file in every directory that is a mount point (from
// /proc/self/mountinfo) and in every directory given as an argument, and
// removes what it created.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"strings"
)

type report struct {
	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	Groups   []int    `json:"groups"`
	Writable []string `json:"writable"`
	Checked  []string `json:"checked"`
	// ReadOnly are the mount points mounted read-only. A directory a
	// non-root user cannot write says nothing about the mount: the root
	// filesystem must be read-only as mounted, whoever runs.
	ReadOnly []string `json:"readOnly"`
}

func main() {
	r := report{UID: os.Getuid(), GID: os.Getgid()}
	r.Groups, _ = os.Getgroups()
	dirs := map[string]bool{}
	for _, d := range os.Args[1:] {
		dirs[d] = true
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// Fields: id, parent, major:minor, root, mount point, options.
			if fields := strings.Fields(sc.Text()); len(fields) > 5 {
				dirs[fields[4]] = true
				for _, o := range strings.Split(fields[5], ",") {
					if o == "ro" {
						r.ReadOnly = append(r.ReadOnly, fields[4])
					}
				}
			}
		}
		f.Close()
	}
	for d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		// /proc and /sys are the kernel's; what is writable there is not a
		// place to keep data.
		if d == "/proc" || strings.HasPrefix(d, "/proc/") || d == "/sys" || strings.HasPrefix(d, "/sys/") {
			continue
		}
		r.Checked = append(r.Checked, d)
		f, err := os.CreateTemp(d, ".inside-")
		if err != nil {
			continue
		}
		f.Close()
		os.Remove(f.Name())
		r.Writable = append(r.Writable, d)
	}
	sort.Strings(r.Checked)
	sort.Strings(r.Writable)
	sort.Strings(r.ReadOnly)
	json.NewEncoder(os.Stdout).Encode(r)
}
