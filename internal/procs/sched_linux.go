package procs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// runQueueWait is how long the process's threads have been runnable but
// without a CPU since they started (the second field of
// /proc/self/task/<tid>/schedstat, summed over the threads; see
// https://docs.kernel.org/scheduler/sched-stats.html), and whether it could
// be read. Threads that exited take their share with them, so the sum may
// fall between two reads; the caller treats a fall as no figure.
func runQueueWait() (time.Duration, bool) {
	threads, err := procfs.AllThreads(os.Getpid())
	if err != nil {
		return 0, false
	}
	var sum uint64
	for _, t := range threads {
		st, err := t.Schedstat()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread exited after it was listed
			}
			return 0, false
		}
		sum += st.WaitingNanoseconds
	}
	return time.Duration(sum), true
}

// cpuLimited reports whether a cgroup CPU bandwidth limit applies to the
// process, reading the cgroup file system under root ("/" but for tests):
// cgroup v2's cpu.max, or v1's cpu.cfs_quota_us, in the process's cgroup
// and every ancestor (Linux's Documentation/admin-guide/cgroup-v2.rst,
// "CPU Interface Files"). When the files cannot be read it says limited:
// more processors than a limit allows make the process throttled in
// bursts, so the Governor goes above the runtime's default only where it
// knows there is no limit.
func cpuLimited(root string) bool {
	pfs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return true
	}
	self, err := pfs.Proc(os.Getpid())
	if err != nil {
		return true
	}
	groups, err := self.Cgroups()
	if err != nil {
		return true
	}
	seen := false
	for _, g := range groups {
		var dir, file string
		switch {
		case g.HierarchyID == 0 && len(g.Controllers) == 0:
			dir, file = filepath.Join(root, "sys/fs/cgroup"), "cpu.max"
			if _, err := os.Stat(dir + "/cgroup.controllers"); err != nil {
				// A v1 machine's unified hierarchy, with no controller.
				dir = filepath.Join(root, "sys/fs/cgroup/unified")
			}
		case slices.Contains(g.Controllers, "cpu"):
			dir, file = filepath.Join(root, "sys/fs/cgroup", strings.Join(g.Controllers, ",")), "cpu.cfs_quota_us"
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(root, "sys/fs/cgroup/cpu")
			}
		default:
			continue
		}
		limited, known := limitAlong(dir, g.Path, file)
		if limited {
			return true
		}
		seen = seen || known
	}
	return !seen
}

// limitAlong reads file in the cgroup at path under the hierarchy mounted
// at dir and in each of its ancestors: whether one of them sets a limit,
// and whether any of them had the file.
func limitAlong(dir, path, file string) (limited, known bool) {
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		data, err := os.ReadFile(filepath.Join(dir, p, file))
		if err == nil {
			known = true
			v := strings.Fields(string(data))
			if len(v) > 0 && v[0] != "max" && v[0] != "-1" {
				return true, true
			}
		}
		if p == "/" {
			return false, known
		}
	}
}
