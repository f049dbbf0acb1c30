package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// watched is a process whose CPU time and resident memory a run accounts
// for, together with its direct children (nginx's workers under its master).
type watched struct {
	name string
	pid  int
}

// parseWatch reads "name=pid".
func parseWatch(s string) (watched, error) {
	name, p, ok := strings.Cut(s, "=")
	pid, err := strconv.Atoi(p)
	if !ok || name == "" || err != nil || pid <= 0 {
		return watched{}, fmt.Errorf("-watch %q: want name=pid", s)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return watched{}, fmt.Errorf("-watch %q: no such process", s)
	}
	return watched{name: name, pid: pid}, nil
}

// family is pid and its direct children.
func family(pid int) []int {
	pids := []int{pid}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		f := statFields(b)
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				child, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				pids = append(pids, child)
			}
		}
	}
	return pids
}

// statFields splits /proc/<pid>/stat after the command name: the first
// field returned is the state (field 3 in proc(5)).
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// cpuTime is the CPU time of pids, in seconds: user (utime) and system
// (stime, the kernel working for them: system calls, and the network
// stack's work they trigger).
type cpuTime struct{ user, system float64 }

// total is user plus system.
func (c cpuTime) total() float64 { return c.user + c.system }

// cpuTimes reads the CPU time of pids.
func cpuTimes(pids []int) (cpuTime, error) {
	var user, system int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return cpuTime{}, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
		}
		f := statFields(b)
		if len(f) < 13 {
			return cpuTime{}, fmt.Errorf("pid %d: short /proc/<pid>/stat", pid)
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		s, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return cpuTime{}, fmt.Errorf("pid %d: unreadable utime/stime", pid)
		}
		user += u
		system += s
	}
	return cpuTime{float64(user) / clockTicks, float64(system) / clockTicks}, nil
}

// rssKiB is the summed VmRSS of pids, in KiB.
func rssKiB(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, fmt.Errorf("reading RSS of pid %d: %w", pid, err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("pid %d: unreadable VmRSS %q", pid, rest)
				}
				total += v
			}
		}
	}
	return total, nil
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
