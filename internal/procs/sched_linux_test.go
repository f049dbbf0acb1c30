package procs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aguard/aguard/internal/await"
)

// cgroupRoot writes files (path relative to the root: content) under a
// temporary root and returns it.
func cgroupRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCPULimitIsReadFromTheCgroupAndItsAncestors(t *testing.T) {
	selfCgroup := fmt.Sprintf("proc/%d/cgroup", os.Getpid())
	for _, c := range []struct {
		name    string
		files   map[string]string
		limited bool
	}{
		{"v2, no limit", map[string]string{
			selfCgroup:                         "0::/app.slice/aguard.service\n",
			"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
			"sys/fs/cgroup/app.slice/aguard.service/cpu.max": "max 100000\n",
			"sys/fs/cgroup/app.slice/cpu.max":                "max 100000\n",
		}, false},
		{"v2, a limit on the parent", map[string]string{
			selfCgroup:                         "0::/app.slice/aguard.service\n",
			"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
			"sys/fs/cgroup/app.slice/aguard.service/cpu.max": "max 100000\n",
			"sys/fs/cgroup/app.slice/cpu.max":                "150000 100000\n",
		}, true},
		{"v2 in a container: its own cgroup at the root", map[string]string{
			selfCgroup:                         "0::/\n",
			"sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
			"sys/fs/cgroup/cpu.max":            "200000 100000\n",
		}, true},
		{"v1, no quota", map[string]string{
			selfCgroup: "4:memory:/x\n3:cpu,cpuacct:/x\n0::/\n",
			"sys/fs/cgroup/cpu,cpuacct/x/cpu.cfs_quota_us": "-1\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":   "-1\n",
		}, false},
		{"v1, a quota, the path namespaced away", map[string]string{
			selfCgroup: "3:cpu,cpuacct:/docker/0123\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
		}, true},
		{"no cgroup file", map[string]string{}, true},
		{"no controller file anywhere", map[string]string{
			selfCgroup: "0::/\n",
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := cpuLimits(cgroupRoot(t, c.files)).limited; got != c.limited {
				t.Fatalf("cpuLimits(…).limited = %v, want %v", got, c.limited)
			}
		})
	}
}

// setFile replaces the file at path under root with content at once (a
// rename), as a reader sees a cgroup file change: never half written.
func setFile(t *testing.T, root, path, content string) {
	t.Helper()
	tmp := filepath.Join(root, path+".new")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, path)); err != nil {
		t.Fatal(err)
	}
}

// unlimitedCgroup is a cgroup v2 root in which no CPU limit applies to the
// process, its cpu.max at cpuMax.
func unlimitedCgroup(t *testing.T) (root, cpuMax string) {
	t.Helper()
	cpuMax = "sys/fs/cgroup/aguard.service/cpu.max"
	return cgroupRoot(t, map[string]string{
		fmt.Sprintf("proc/%d/cgroup", os.Getpid()): "0::/aguard.service\n",
		"sys/fs/cgroup/cgroup.controllers":         "cpu memory\n",
		"sys/fs/cgroup/cpu.max":                    "max 100000\n",
		cpuMax:                                     "max 100000\n",
	}), cpuMax
}

func TestAChangedCPULimitReadsAsAChange(t *testing.T) {
	root, cpuMax := unlimitedCgroup(t)
	was := cpuLimits(root)
	if was.limited {
		t.Fatal("limited with cpu.max at max")
	}
	for _, c := range []struct {
		cpuMax  string
		limited bool
	}{
		{"200000 100000\n", true}, // two CPUs
		{"150000 100000\n", true}, // resized in place to one and a half
		{"max 100000\n", false},   // lifted
	} {
		setFile(t, root, cpuMax, c.cpuMax)
		now := cpuLimits(root)
		if now.limited != c.limited {
			t.Fatalf("cpu.max %q: limited %v, want %v", c.cpuMax, now.limited, c.limited)
		}
		if now == was {
			t.Fatalf("cpu.max %q read the same as before it changed: %+v", c.cpuMax, now)
		}
		if again := cpuLimits(root); again != now {
			t.Fatalf("cpu.max %q read twice, unchanged, read differently: %+v, then %+v", c.cpuMax, now, again)
		}
		was = now
	}
}

// TestTheGovernorHandsBackTheDefaultWhenTheCPULimitsChange runs a real
// Governor on a cgroup file system of the test's: once a quiet process has
// one processor, its cgroup's CPU limit changes, and the Governor gives the
// runtime its default back at its next read of the limits, then fits from
// there.
func TestTheGovernorHandsBackTheDefaultWhenTheCPULimitsChange(t *testing.T) {
	most := runtime.GOMAXPROCS(0)
	if most < 2 {
		t.Skipf("the runtime's default is %d processor here: nothing to govern", most)
	}
	root, cpuMax := unlimitedCgroup(t)
	var (
		mu      sync.Mutex
		changed bool
		peak    int // the most processors the Governor's reads saw since the change
	)
	wakeups := func() (uint64, uint64) {
		mu.Lock()
		defer mu.Unlock()
		if changed {
			peak = max(peak, runtime.GOMAXPROCS(0))
		}
		return 0, 0
	}
	g := start(Options{Every: 10 * time.Millisecond, Window: 100 * time.Millisecond, LimitsEvery: 20 * time.Millisecond, Wakeups: wakeups}, root)
	if g == nil {
		t.Fatal("no Governor started")
	}
	t.Cleanup(g.Stop)
	await.For(t, "GOMAXPROCS 1 while the process is quiet", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	mu.Lock()
	changed = true
	mu.Unlock()
	setFile(t, root, cpuMax, fmt.Sprintf("%d 100000\n", most*100000))
	await.For(t, "the runtime's default again after the CPU limit changed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return peak == most
	})
	await.For(t, "GOMAXPROCS 1 again, a window later, for the quiet process", func() bool { return runtime.GOMAXPROCS(0) == 1 })
}

func TestRunQueueWaitGrowsWhileTheCPUsAreTaken(t *testing.T) {
	w := newWaitReader()
	defer w.close()
	before, ok := w.read()
	if !ok {
		t.Fatal("no run-queue wait read from /proc/self/task/*/schedstat")
	}
	stop := hog(t)
	defer stop()
	spin(t, time.Now().Add(100*time.Millisecond))
	await.For(t, "the run-queue wait to grow with every CPU taken by other processes", func() bool {
		spin(t, time.Now().Add(20*time.Millisecond))
		after, ok := w.read()
		return ok && after > before
	})
}

func TestFieldsAreReadAsTheKernelWritesThem(t *testing.T) {
	for _, c := range []struct {
		line string
		n    int
		want uint64
		ok   bool
	}{
		{"4332039 53389 7\n", 1, 53389, true},                        // schedstat: the wait
		{"cpu  6021 12 3077 908123 455 0 31 0 0 0", 4, 908123, true}, // /proc/stat: idle
		{"cpu  6021 12 3077 908123 455 0 31 0 0 0", 5, 455, true},    // iowait
		{"4332039\n", 1, 0, false},
		{"4332039 -5 7", 1, 0, false},
		{"", 0, 0, false},
	} {
		if got, ok := uintField([]byte(c.line), c.n); got != c.want || ok != c.ok {
			t.Errorf("field %d of %q = %d, %v; want %d, %v", c.n, c.line, got, ok, c.want, c.ok)
		}
	}
}

func TestTheHostsIdleTimeGrowsWhileItsCPUsAreFree(t *testing.T) {
	r := newIdleReader()
	defer r.close()
	before, ok := r.read()
	if !ok {
		t.Fatal("no idle time read from /proc/stat")
	}
	if before <= 0 {
		t.Fatalf("idle time %v since boot", before)
	}
	await.For(t, "the host's idle time to grow while this test waits", func() bool {
		after, ok := r.read()
		return ok && after > before
	})
}

func TestTheHostsCPUsAreCountedFromItsPerCPULines(t *testing.T) {
	stat := "cpu  4705 356 584 3699 23 23 0 0 0 0\n" +
		"cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n" +
		"cpu1 1335 1 10 2000 3 0 0 0 0 0\n" +
		"cpu13 1 1 1 1 1 0 0 0 0 0\n" +
		"intr 1462898\nctxt 115315\nbtime 769041601\nprocesses 86031\n"
	if got := countCPUs([]byte(stat)); got != 3 {
		t.Fatalf("%d CPUs counted in\n%s\nwant 3", got, stat)
	}
	// On this host: at least the CPUs this process may run on.
	r := newIdleReader()
	defer r.close()
	if _, ok := r.read(); !ok {
		t.Fatal("no idle time read from /proc/stat")
	}
	if r.cpus < runtime.NumCPU() {
		t.Fatalf("/proc/stat lists %d CPUs, fewer than the %d this process may run on", r.cpus, runtime.NumCPU())
	}
}

func TestAThreadThatExitsIsDroppedWithItsFile(t *testing.T) {
	w := newWaitReader()
	defer w.close()
	tid, exit := threadOfItsOwn(t)
	before, ok := w.read()
	if !ok {
		t.Fatal("no run-queue wait read from /proc/self/task/*/schedstat")
	}
	th := w.threads[tid]
	if th == nil {
		t.Fatalf("thread %d was not read", tid)
	}
	fd := th.fd
	exit()
	await.For(t, "the exited thread dropped from the reader", func() bool {
		after, ok := w.read()
		if ok && after < before {
			t.Fatalf("the run-queue wait fell from %v to %v", before, after)
		}
		return ok && w.threads[tid] == nil
	})
	if _, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
		for _, other := range w.threads {
			if other.fd == fd {
				return // the number was reused for another thread's file
			}
		}
		t.Fatalf("descriptor %d of the exited thread's file is still open", fd)
	}
}

func TestTheWaitReaderClosesEveryFileItOpened(t *testing.T) {
	open := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(fds)
	}
	before := open()
	w := newWaitReader()
	for range 3 {
		if _, ok := w.read(); !ok {
			t.Fatal("no run-queue wait read")
		}
	}
	if during := open(); during <= before {
		t.Fatalf("%d descriptors open while reading, %d before: the reader keeps no file open", during, before)
	}
	w.close()
	if after := open(); after != before {
		t.Fatalf("%d descriptors open after close, %d before", after, before)
	}
}

// governContended starts a Governor with opt, its intervals shortened,
// beside processes that keep every CPU busy (hog) and goroutines that keep
// as many busy as the runtime's default. It returns that default and what
// stops the goroutines; the rest stops with the test. It skips where there
// is nothing to govern or a CPU limit keeps the Governor at the default.
func governContended(t *testing.T, opt Options) (most int, stop func()) {
	t.Helper()
	most = runtime.GOMAXPROCS(0)
	if most < 2 {
		t.Skipf("the runtime's default is %d processor here: nothing to govern", most)
	}
	if cpuLimits("/").limited {
		t.Skip("a cgroup CPU limit applies here (or none could be read): the Governor stays at the default, as TestACPULimitKeepsTheProcessorsAtTheDefault shows")
	}
	opt.Every, opt.Window = 10*time.Millisecond, 100*time.Millisecond
	g := Start(opt)
	if g == nil {
		t.Fatal("no Governor started")
	}
	t.Cleanup(g.Stop)
	hog(t)
	ctx, cancel := context.WithCancel(context.Background())
	var burners sync.WaitGroup
	for range most {
		burners.Go(func() {
			for ctx.Err() == nil {
			}
		})
	}
	stop = func() {
		cancel()
		burners.Wait()
	}
	t.Cleanup(stop)
	return most, stop
}

// TestTheGovernorGoesBeyondTheDefaultOnAContendedHost runs a real Governor
// beside processes that keep every CPU busy: a process busy one CPU's worth
// gets twice the default processors, and comes down to the default or
// below when its load goes.
func TestTheGovernorGoesBeyondTheDefaultOnAContendedHost(t *testing.T) {
	most, stop := governContended(t, Options{})
	await.For(t, "GOMAXPROCS twice the default while other processes take the CPUs", func() bool { return runtime.GOMAXPROCS(0) == 2*most })
	stop()
	await.For(t, "GOMAXPROCS back to the default or below once the load is gone", func() bool { return runtime.GOMAXPROCS(0) <= most })
}

// TestTheGovernorStaysAtTheDefaultOnAContendedHostWhileBacklogged is the
// test above with every wakeup of the data plane finding several events:
// backlogged streams, for which more threads than CPUs only take CPU from
// the processes that feed and drain them. It watches GOMAXPROCS at each of
// the Governor's reads of the wakeups for thirty intervals of contention.
func TestTheGovernorStaysAtTheDefaultOnAContendedHostWhileBacklogged(t *testing.T) {
	var (
		mu    sync.Mutex
		woken uint64
		reads int // the Governor's reads since the load started
		load  bool
		peak  int // the most processors seen at those reads
	)
	wakeups := func() (uint64, uint64) {
		mu.Lock()
		defer mu.Unlock()
		woken += 100 // every wakeup read several events
		if load {
			reads++
			peak = max(peak, runtime.GOMAXPROCS(0))
		}
		return woken, 5 * woken
	}
	most, stop := governContended(t, Options{Wakeups: wakeups})
	mu.Lock()
	load = true
	mu.Unlock()
	await.For(t, "thirty intervals read under contention", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reads >= 30
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if peak > most {
		t.Fatalf("GOMAXPROCS reached %d on a contended host with backlogged streams, want at most the default %d", peak, most)
	}
}

// threadOfItsOwn starts a goroutine locked to a thread that is not the
// process's main thread (which Go never lets exit) and returns the thread's
// id and what ends the goroutine, and with it the thread.
func threadOfItsOwn(t *testing.T) (tid int, exit func()) {
	t.Helper()
	var release []chan struct{} // goroutines holding the main thread
	defer func() {
		for _, r := range release {
			close(r)
		}
	}()
	for {
		tids, end, done := make(chan int), make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			id := syscall.Gettid()
			tids <- id
			<-end
			if id == os.Getpid() {
				runtime.UnlockOSThread() // the main thread goes back to the runtime
			} // else never unlocked: the thread exits with the goroutine
		}()
		id := <-tids
		if id != os.Getpid() {
			return id, func() { close(end); <-done }
		}
		release = append(release, end) // held, so that the next goroutine runs elsewhere
	}
}

// hog starts a shell busy loop per CPU, other processes keeping every CPU
// busy, and returns what stops them.
func hog(t *testing.T) func() {
	t.Helper()
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			t.Fatalf("starting a busy loop: %v", err)
		}
		cmds = append(cmds, c)
	}
	t.Cleanup(stop)
	return stop
}

// spin keeps this goroutine's CPU busy until the deadline.
func spin(t *testing.T, until time.Time) {
	t.Helper()
	for time.Now().Before(until) {
	}
}

// BenchmarkRunQueueWait is one read of the process's run-queue wait, as
// the Governor makes every interval while at the runtime's default, with
// the benchmark's own threads (about a dozen, as aguard's).
func BenchmarkRunQueueWait(b *testing.B) {
	w := newWaitReader()
	defer w.close()
	for b.Loop() {
		if _, ok := w.read(); !ok {
			b.Fatal("no run-queue wait read")
		}
	}
}
