package procs

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// waitReader reads how long the process's threads have been runnable but
// without a CPU: the second field of /proc/self/task/<tid>/schedstat
// (https://docs.kernel.org/scheduler/sched-stats.html). It keeps each
// thread's file open and reads it again from offset 0, which makes the
// kernel write it anew (seq_file), and lists the threads again every
// relistEvery reads: one system call per thread a read, where opening,
// reading and closing each file, and listing the threads, took three per
// thread and a path lookup in /proc each (3.6 % of aguard's CPU at 1,000
// streams × 20 events/s, where the Governor reads it ten times a second;
// bench/README.md, "The Governor's reads").
//
// Its figure is the sum of each thread's growth between two reads: a
// thread adds nothing for the time before it was first read (up to a
// second after it started), and one that exits takes nothing away, so the
// figure never falls.
type waitReader struct {
	dir     *os.File // /proc/self/task, once listed
	threads map[int]*threadWait
	total   time.Duration
	reads   int
	buf     [128]byte
}

// relistEvery is how many reads a listing of the threads serves.
const relistEvery = 10

// threadWait is one thread's open schedstat file.
type threadWait struct {
	fd     int
	last   uint64 // run-queue wait in ns at the last read
	read   bool   // last holds a figure
	listed bool   // in the latest listing
}

func newWaitReader() *waitReader {
	return &waitReader{threads: make(map[int]*threadWait)}
}

// read returns the process's run-queue wait so far, and whether it could
// be read.
func (w *waitReader) read() (time.Duration, bool) {
	if w.reads%relistEvery == 0 && !w.list() {
		return 0, false
	}
	w.reads++
	for tid, t := range w.threads {
		wait, ok := w.threadWait(t)
		if !ok { // the thread exited
			syscall.Close(t.fd)
			delete(w.threads, tid)
			continue
		}
		if t.read && wait > t.last {
			w.total += time.Duration(wait - t.last)
		}
		t.last, t.read = wait, true
	}
	return w.total, true
}

// list opens the file of each thread not yet known and closes those of
// threads gone; it reports whether the threads could be listed.
func (w *waitReader) list() bool {
	if w.dir == nil {
		d, err := os.Open("/proc/self/task")
		if err != nil {
			return false
		}
		w.dir = d
	} else if _, err := w.dir.Seek(0, io.SeekStart); err != nil {
		return false
	}
	names, err := w.dir.Readdirnames(-1)
	if err != nil {
		return false
	}
	for _, t := range w.threads {
		t.listed = false
	}
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if t := w.threads[tid]; t != nil {
			t.listed = true
			continue
		}
		fd, err := syscall.Open("/proc/self/task/"+name+"/schedstat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue // the thread exited after it was listed
		}
		w.threads[tid] = &threadWait{fd: fd, listed: true}
	}
	for tid, t := range w.threads {
		if !t.listed {
			syscall.Close(t.fd)
			delete(w.threads, tid)
		}
	}
	return true
}

// threadWait reads t's file, "<run ns> <wait ns> <timeslices>", for its
// second field.
func (w *waitReader) threadWait(t *threadWait) (uint64, bool) {
	n, err := syscall.Pread(t.fd, w.buf[:], 0)
	if err != nil || n <= 0 {
		return 0, false
	}
	return uintField(w.buf[:n], 1)
}

// close closes the files the reader holds.
func (w *waitReader) close() {
	for tid, t := range w.threads {
		syscall.Close(t.fd)
		delete(w.threads, tid)
	}
	if w.dir != nil {
		w.dir.Close()
		w.dir = nil
	}
}

// idleReader reads how much CPU time the host's CPUs have spent idle (the
// idle and iowait fields of /proc/stat's first line, in USER_HZ ticks of
// 10 ms; https://docs.kernel.org/filesystems/proc.html, "Miscellaneous
// kernel statistics in /proc/stat"), keeping the file open as waitReader
// does its files. That line sums every CPU of the host, which may be more
// than the process may run on (a container pinned to a few of them): it
// is divided by the CPUs the file lists, counted when it is opened.
type idleReader struct {
	fd   int // -1 before the file is opened
	cpus int // the CPUs /proc/stat listed when opened
	buf  [512]byte
}

func newIdleReader() *idleReader { return &idleReader{fd: -1} }

// read returns the host's idle CPU time so far, averaged over its CPUs,
// and whether it could be read.
func (r *idleReader) read() (time.Duration, bool) {
	if r.fd < 0 {
		stat, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, false
		}
		cpus := countCPUs(stat)
		if cpus == 0 {
			return 0, false
		}
		fd, err := syscall.Open("/proc/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return 0, false
		}
		r.fd, r.cpus = fd, cpus
	}
	n, err := syscall.Pread(r.fd, r.buf[:], 0)
	if err != nil || n <= 0 {
		return 0, false
	}
	line := r.buf[:n]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	// "cpu  user nice system idle iowait irq softirq steal ..."
	if !bytes.HasPrefix(line, []byte("cpu ")) {
		return 0, false
	}
	idle, ok := uintField(line, 4)
	iowait, ok2 := uintField(line, 5)
	if !ok || !ok2 {
		return 0, false
	}
	return time.Duration(idle+iowait) * 10 * time.Millisecond / time.Duration(r.cpus), true
}

// countCPUs counts the per-CPU lines ("cpu0 …", "cpu1 …") of /proc/stat:
// the host's online CPUs, which its first line sums.
func countCPUs(stat []byte) int {
	n := 0
	for line := range bytes.Lines(stat) {
		if len(line) > 3 && bytes.HasPrefix(line, []byte("cpu")) && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

// close closes the file.
func (r *idleReader) close() {
	if r.fd >= 0 {
		syscall.Close(r.fd)
		r.fd = -1
	}
}

// uintField returns field n (from 0) of a line of fields separated by
// spaces, as a decimal number, and whether it is one.
func uintField(line []byte, n int) (uint64, bool) {
	for {
		line = bytes.TrimLeft(line, " ")
		end := bytes.IndexAny(line, " \n")
		if end < 0 {
			end = len(line)
		}
		if n == 0 {
			v, err := strconv.ParseUint(string(line[:end]), 10, 64)
			return v, err == nil
		}
		if end == len(line) {
			return 0, false
		}
		line, n = line[end:], n-1
	}
}

// cpuLimits reads the CPU limits that apply to the process, from the
// cgroup file system under root ("/" but for tests): whether a cgroup CPU
// bandwidth limit applies (cgroup v2's cpu.max, or v1's cpu.cfs_quota_us,
// in the process's cgroup and every ancestor; Linux's
// Documentation/admin-guide/cgroup-v2.rst, "CPU Interface Files"), and
// what those files and the process's CPU affinity said, to compare with
// the next read. When the files cannot be read it says limited: more
// processors than a limit allows make the process throttled in bursts, so
// the Governor goes above the runtime's default only where it knows there
// is no limit.
func cpuLimits(root string) limits {
	var l limits
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		l.seen = strconv.Itoa(set.Count()) + " CPUs\n"
	}
	groups, err := selfCgroups(root)
	if err != nil {
		l.limited = true
		return l
	}
	known := false
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
		known = limitAlong(dir, g.Path, file, &l) || known
	}
	l.limited = l.limited || !known
	return l
}

// selfCgroups lists the process's cgroups, from /proc under root.
func selfCgroups(root string) ([]procfs.Cgroup, error) {
	pfs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		return nil, err
	}
	self, err := pfs.Proc(os.Getpid())
	if err != nil {
		return nil, err
	}
	return self.Cgroups()
}

// limitAlong reads file in the cgroup at path under the hierarchy mounted
// at dir and in each of its ancestors into l (seen, and limited when one
// of them sets a limit), and reports whether any of them had the file.
func limitAlong(dir, path, file string, l *limits) (known bool) {
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		data, err := os.ReadFile(filepath.Join(dir, p, file))
		if err == nil {
			known = true
			l.seen += p + " " + string(data)
			v := strings.Fields(string(data))
			if len(v) > 0 && v[0] != "max" && v[0] != "-1" {
				l.limited = true
			}
		}
		if p == "/" {
			return known
		}
	}
}
