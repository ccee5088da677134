package nodecluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Prerequisites lists what the node needs from the host and is missing,
// empty when it has it all: root, and the Debian packages containerd, runc,
// containernetworking-plugins and iptables (docs/quickstart.md).
func Prerequisites() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node changes cgroups, iptables, mounts and network links)")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "iptables-save", "iptables-restore", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniDir, plugin)+" (containernetworking-plugins)")
		}
	}
	return missing
}

// hostState is what the node changes on the host, as it was before: Restore
// puts it back and removes what was added.
type hostState struct {
	dir      string            // the cluster's directory; every mount under it is ours
	sysctls  map[string]string // path under /proc/sys -> value
	iptables map[string]string // iptables-save binary -> its output
	cgroups  map[string]bool   // top-level cgroup directories that existed
	netns    map[string]bool   // /run/netns entries that existed
	dirs     []string          // host directories the kubelet creates, absent before
	bridge   bool              // Bridge was created
}

// hostDirs are paths outside the cluster's directory that the node creates
// whatever its configuration says: the kubelet's device plugin directory
// (/var/lib/kubelet/device-plugins) and /var/log/containers are constants,
// containerd 1.6 puts its shims' sockets in /run/containerd/s, and the CNI
// library caches results in /var/lib/cni. Those absent before are removed.
var hostDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd", "/var/lib/cni"}

func saveHost(dir string) (*hostState, error) {
	h := &hostState{dir: dir, sysctls: map[string]string{}, iptables: map[string]string{}, cgroups: map[string]bool{}, netns: map[string]bool{}}
	for _, s := range hostSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			continue // not in this kernel
		}
		h.sysctls[s] = strings.TrimSpace(string(b))
	}
	for _, save := range iptablesSaves() {
		out, err := exec.Command(save).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", save, err)
		}
		h.iptables[save] = string(out)
	}
	for _, d := range cgroupDirs() {
		h.cgroups[d] = true
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			h.netns[e.Name()] = true
		}
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			h.dirs = append(h.dirs, d)
		}
	}
	return h, nil
}

// apply writes hostSettings; restore writes the saved values back.
func (h *hostState) apply() error {
	for s, v := range hostSettings {
		if _, saved := h.sysctls[s]; !saved {
			return fmt.Errorf("kernel setting %s is missing (for the bridge: modprobe br_netfilter)", s)
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v+"\n"), 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", s, err)
		}
	}
	return nil
}

// createBridge adds Bridge with GatewayIP before any pod exists, so that
// the apiserver and brokers can bind to GatewayIP; the CNI bridge plugin
// adopts it.
func (h *hostState) createBridge() error {
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		return fmt.Errorf("network link %s exists already: another node cluster runs here, or one was not torn down (ip link delete %s)", Bridge, Bridge)
	}
	h.bridge = true
	for _, args := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", gatewayCIDR, "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// restore undoes what the node did to the host, once its processes are
// gone: it unmounts what was mounted under the cluster's directory and in
// /run/netns, removes the cgroups, iptables rules and chains that were
// added, deletes the bridge and writes the saved sysctls back.
func (h *hostState) restore() error {
	var errs []error
	errs = append(errs, h.unmount())
	errs = append(errs, h.removeCgroups())
	for save, before := range h.iptables {
		errs = append(errs, restoreIptables(save, before))
	}
	if h.bridge {
		if out, err := exec.Command("ip", "link", "delete", Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w: %s", Bridge, err, bytes.TrimSpace(out)))
		}
	}
	for s, v := range h.sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", s, err))
		}
	}
	for _, d := range h.dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// changes reports what differs on the host from what was saved, so that a
// teardown that left something behind fails the test; empty when nothing
// does.
func (h *hostState) changes() []string {
	var diffs []string
	for s, v := range h.sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil && strings.TrimSpace(string(b)) != v {
			diffs = append(diffs, fmt.Sprintf("sysctl %s is %s, was %s", s, strings.TrimSpace(string(b)), v))
		}
	}
	for save, before := range h.iptables {
		out, err := exec.Command(save).Output()
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: %v", save, err))
			continue
		}
		for _, l := range newIptablesLines(before, string(out)) {
			diffs = append(diffs, save+": "+l)
		}
	}
	for _, d := range cgroupDirs() {
		if !h.cgroups[d] {
			diffs = append(diffs, "cgroup "+d)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if !h.netns[e.Name()] {
				diffs = append(diffs, "network namespace /run/netns/"+e.Name())
			}
		}
	}
	for _, m := range h.mounts() {
		diffs = append(diffs, "mount "+m)
	}
	if _, err := os.Stat("/sys/class/net/" + Bridge); err == nil {
		diffs = append(diffs, "network link "+Bridge)
	}
	for _, d := range h.dirs {
		if _, err := os.Lstat(d); err == nil {
			diffs = append(diffs, "directory "+d)
		}
	}
	return diffs
}

// mounts lists the mount points that are the node's: under its directory,
// or a network namespace that was not there before. Deepest first.
func (h *hostState) mounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ours []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		ns, isNS := strings.CutPrefix(mp, "/run/netns/")
		if strings.HasPrefix(mp, h.dir+"/") || isNS && !h.netns[ns] {
			ours = append(ours, mp)
		}
	}
	sort.Slice(ours, func(i, j int) bool { return len(ours[i]) > len(ours[j]) })
	return slices.Compact(ours)
}

func (h *hostState) unmount() error {
	var errs []error
	for _, mp := range h.mounts() {
		// Detach: a process that has not quite exited may still hold it.
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if !h.netns[e.Name()] {
				os.Remove(filepath.Join("/run/netns", e.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDirs lists the top-level directories of every cgroup hierarchy
// (v1: one per controller; v2: the one), such as
// /sys/fs/cgroup/memory/kubepods.
func cgroupDirs() []string {
	var dirs []string
	roots := []string{"/sys/fs/cgroup"}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		roots = nil // v1: each entry is a hierarchy
		entries, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range entries {
			if e.IsDir() {
				roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
			}
		}
	}
	for _, r := range roots {
		entries, _ := os.ReadDir(r)
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(r, e.Name()))
			}
		}
	}
	return dirs
}

// cgroupProcs lists the processes in the cgroups the node added, to be
// killed if the kubelet left any.
func (h *hostState) cgroupProcs() []int {
	var pids []int
	for _, d := range cgroupDirs() {
		if h.cgroups[d] {
			continue
		}
		filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes the cgroups the node added, deepest first. A cgroup
// can be removed once its last process has exited, which after a kill takes
// a moment, so it retries until a deadline.
func (h *hostState) removeCgroups() error {
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond) // the kernel has no event for this
	defer tick.Stop()
	for {
		var left []string
		for _, d := range cgroupDirs() {
			if h.cgroups[d] {
				continue
			}
			var sub []string
			filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					sub = append(sub, path)
				}
				return nil
			})
			sort.Slice(sub, func(i, j int) bool { return len(sub[i]) > len(sub[j]) })
			for _, s := range sub {
				if err := syscall.Rmdir(s); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, fmt.Sprintf("%s: %v", s, err))
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups left behind: %s", strings.Join(left, "; "))
		}
		<-tick.C
	}
}

// iptablesSaves are the iptables-save binaries present: IPv4, and IPv6
// where the host has it (the kubelet and kube-proxy program both).
func iptablesSaves() []string {
	var saves []string
	for _, s := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(s); err == nil {
			saves = append(saves, s)
		}
	}
	return saves
}

// restoreIptables removes the rules and chains that were added since
// before was saved, and nothing else, so that rules someone else added to
// the host in the meantime stay.
func restoreIptables(save, before string) error {
	out, err := exec.Command(save).Output()
	if err != nil {
		return fmt.Errorf("%s: %w", save, err)
	}
	script := iptablesUndo(before, string(out))
	if script == "" {
		return nil
	}
	restore := strings.Replace(save, "-save", "-restore", 1)
	cmd := exec.Command(restore, "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s\ninput:\n%s", restore, err, bytes.TrimSpace(out), script)
	}
	return nil
}

// iptablesTables parses iptables-save output into table -> user-defined
// chains and table -> rules ("-A CHAIN ...").
func iptablesTables(s string) (chains, rules map[string][]string) {
	chains, rules = map[string][]string{}, map[string][]string{}
	table := ""
	for _, l := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			// ":NAME POLICY [counters]": a built-in chain has a policy and
			// comes with its table, which iptables cannot delete; a
			// user-defined chain has "-".
			if f := strings.Fields(l[1:]); len(f) > 1 && f[1] == "-" {
				chains[table] = append(chains[table], f[0])
			}
		case strings.HasPrefix(l, "-A "):
			rules[table] = append(rules[table], l)
		}
	}
	return chains, rules
}

// iptablesUndo is the iptables-restore --noflush input that deletes, per
// table, the rules of after that before did not have (in chains that
// existed), then flushes and deletes the chains that are new.
func iptablesUndo(before, after string) string {
	bChains, bRules := iptablesTables(before)
	aChains, aRules := iptablesTables(after)
	var b strings.Builder
	tables := make([]string, 0, len(aChains))
	for t := range aChains {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		var lines []string
		var added []string
		for _, c := range aChains[t] {
			if !slices.Contains(bChains[t], c) {
				added = append(added, c)
			}
		}
		for _, r := range aRules[t] {
			chain := strings.Fields(r)[1]
			if !slices.Contains(bRules[t], r) && !slices.Contains(added, chain) {
				lines = append(lines, "-D"+strings.TrimPrefix(r, "-A"))
			}
		}
		for _, c := range added {
			lines = append(lines, "-F "+c)
		}
		for _, c := range added {
			lines = append(lines, "-X "+c)
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", t, strings.Join(lines, "\n"))
		}
	}
	return b.String()
}

// newIptablesLines are the chains and rules in after that before lacks.
func newIptablesLines(before, after string) []string {
	bChains, bRules := iptablesTables(before)
	aChains, aRules := iptablesTables(after)
	var diffs []string
	for t, cs := range aChains {
		for _, c := range cs {
			if !slices.Contains(bChains[t], c) {
				diffs = append(diffs, fmt.Sprintf("table %s: chain %s", t, c))
			}
		}
	}
	for t, rs := range aRules {
		for _, r := range rs {
			if !slices.Contains(bRules[t], r) {
				diffs = append(diffs, fmt.Sprintf("table %s: rule %s", t, r))
			}
		}
	}
	return diffs
}
