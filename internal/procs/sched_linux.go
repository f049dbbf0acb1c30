package procs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runQueueWait is how long the process's threads have been runnable but
// without a CPU since they started (the second field of
// /proc/self/task/<tid>/schedstat, summed over the threads; see
// https://docs.kernel.org/scheduler/sched-stats.html), and whether it could
// be read. Threads that exited take their share with them, so the sum may
// fall between two reads; the caller treats a fall as no figure.
func runQueueWait() (time.Duration, bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, false
	}
	var sum int64
	var buf [128]byte
	for _, t := range tasks {
		f, err := os.Open("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited
		}
		n, err := f.Read(buf[:])
		f.Close()
		if err != nil {
			continue // the thread exited after it was listed
		}
		fields := bytes.Fields(buf[:n])
		if len(fields) < 2 {
			return 0, false
		}
		ns, err := strconv.ParseInt(string(fields[1]), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += ns
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
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return true
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	seen := false
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = filepath.Join(root, "sys/fs/cgroup"), "cpu.max"
			if _, err := os.Stat(dir + "/cgroup.controllers"); err != nil {
				// A v1 machine's unified hierarchy, with no controller.
				dir = filepath.Join(root, "sys/fs/cgroup/unified")
			}
		case hasController(parts[1], "cpu"):
			dir, file = filepath.Join(root, "sys/fs/cgroup", parts[1]), "cpu.cfs_quota_us"
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(root, "sys/fs/cgroup/cpu")
			}
		default:
			continue
		}
		limited, known := limitAlong(dir, parts[2], file)
		if limited {
			return true
		}
		seen = seen || known
	}
	return !seen
}

// hasController reports whether the comma-separated list names c.
func hasController(list, c string) bool {
	for name := range strings.SplitSeq(list, ",") {
		if name == c {
			return true
		}
	}
	return false
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
