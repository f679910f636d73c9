// Package cgroupfs tells the runtime backends which cgroup hierarchy a
// mount point holds: each backend puts its sandboxes in cgroups of its own
// and must know whether a host is v1, v2 or hybrid.
package cgroupfs

import "golang.org/x/sys/unix"

// IsV2 reports whether path is the root of a cgroup v2 filesystem.
func IsV2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
