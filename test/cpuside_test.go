package test

// The two-host test bed's processors: each side of the split (the storage
// side: featurefs serve; the trainer side: the mount or the split bench's
// helper) runs in a cgroup of its own that holds it on its own CPUs
// (cpuset), the storage side optionally under a CPU quota (a weaker
// storage host, as in NDPipe and HAPI). With the network namespaces of
// netns_test.go, one machine stands for two hosts joined by a shaped
// link. cgroup v1 (the cpuset and cpu hierarchies) and v2 (one unified
// hierarchy) are both handled; a machine lacking the cpuset or cpu
// controller is refused with a message that says so.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/test/testenv"
)

// cgroupPrefix starts the names of the cgroups this file makes; the
// creating process's id follows, so stale ones can be told apart.
const cgroupPrefix = "fftbcpu"

// cpuSide is one side's cgroup: a directory per hierarchy (one on v2,
// cpuset and cpu on v1).
type cpuSide struct {
	Name  string
	CPUs  string  // the cpuset, Linux's list form
	Quota float64 // cores; 0: none
	dirs  []string
	v2    bool
}

// cgroupRoots returns the directories under which this process may make
// cgroups for the cpuset and cpu controllers (its own cgroups), whether
// the hierarchy is v2, or an error that says what is missing.
func cgroupRoots() (roots []string, v2 bool, err error) {
	own := map[string]string{} // controller ("" for v2) -> path
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, false, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		have := strings.Fields(string(ctl))
		for _, c := range []string{"cpuset", "cpu"} {
			if !containsWord(have, c) {
				return nil, true, fmt.Errorf("cgroup v2 without the %s controller (/sys/fs/cgroup/cgroup.controllers: %q)", c, strings.TrimSpace(string(ctl)))
			}
		}
		return []string{filepath.Join("/sys/fs/cgroup", own[""])}, true, nil
	}
	for _, c := range []string{"cpuset", "cpu"} {
		p, ok := own[c]
		mnt := filepath.Join("/sys/fs/cgroup", c)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); !ok || err != nil {
			return nil, false, fmt.Errorf("cgroup v1 without a %s hierarchy at %s", c, mnt)
		}
		roots = append(roots, filepath.Join(mnt, p))
	}
	return roots, false, nil
}

func containsWord(ws []string, w string) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// splitCPUs divides this process's CPUs between the two sides: the first
// half (at least one) for the storage side, the rest for the trainer.
func splitCPUs(t testing.TB) (storage, trainer string) {
	t.Helper()
	set, ok := split.ParseCPUList(split.ProcessCPUs())
	if !ok || len(set) < 2 {
		t.Fatalf("the two-host test bed needs 2 CPUs or more, one side each; this process may use %q", split.ProcessCPUs())
	}
	var cpus []int
	for c := range maxCPU(set) + 1 {
		if set[c] {
			cpus = append(cpus, c)
		}
	}
	list := func(cs []int) string {
		var s []string
		for _, c := range cs {
			s = append(s, strconv.Itoa(c))
		}
		return strings.Join(s, ",")
	}
	h := len(cpus) / 2
	return list(cpus[:h]), list(cpus[h:])
}

func maxCPU(set map[int]bool) int {
	m := 0
	for c := range set {
		m = max(m, c)
	}
	return m
}

// newCPUSide makes a cgroup named for this process and name holding its
// processes on cpus under quota cores (0: none), and removes it when the
// test ends (after the processes started in it, whose cleanups run
// first: register it before starting them).
func newCPUSide(t testing.TB, name, cpus string, quota float64) *cpuSide {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the two-host test bed needs root (cgroups)")
	}
	roots, v2, err := cgroupRoots()
	if err != nil {
		t.Fatalf("the two-host test bed needs the cpuset and cpu cgroup controllers: %v", err)
	}
	removeStaleCPUSides(t, roots)
	s := &cpuSide{Name: fmt.Sprintf("%s%d%s", cgroupPrefix, os.Getpid(), name), CPUs: cpus, v2: v2}
	t.Cleanup(func() {
		if err := s.remove(); err != nil {
			t.Errorf("cgroup %s: %v", s.Name, err)
		}
	})
	for _, r := range roots {
		d := filepath.Join(r, s.Name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("cgroup %s: %v", d, err)
		}
		s.dirs = append(s.dirs, d)
	}
	if v2 {
		// The parent hands the controllers down (a no-op where it does).
		_ = os.WriteFile(filepath.Join(roots[0], "cgroup.subtree_control"), []byte("+cpuset +cpu"), 0)
		write(t, s.dirs[0], "cpuset.cpus", cpus)
	} else {
		write(t, s.dirs[0], "cpuset.cpus", cpus)
		mems, err := os.ReadFile(filepath.Join(roots[0], "cpuset.mems"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, s.dirs[0], "cpuset.mems", strings.TrimSpace(string(mems)))
	}
	s.SetQuota(t, quota)
	return s
}

func write(t testing.TB, dir, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
		t.Fatalf("cgroup %s/%s = %q: %v", dir, file, v, err)
	}
}

// SetQuota limits the side to quota cores (0: no limit), at once for the
// processes in it.
func (s *cpuSide) SetQuota(t testing.TB, quota float64) {
	t.Helper()
	const period = 100000
	q := "max"
	if quota > 0 {
		q = strconv.Itoa(int(quota * period))
	}
	if s.v2 {
		write(t, s.dirs[0], "cpu.max", q+" "+strconv.Itoa(period))
	} else {
		if q == "max" {
			q = "-1"
		}
		write(t, s.dirs[1], "cpu.cfs_period_us", strconv.Itoa(period))
		write(t, s.dirs[1], "cpu.cfs_quota_us", q)
	}
	s.Quota = quota
}

// Wrap makes cmd start in the side: a shell writes its own pid into the
// side's cgroups, then execs cmd's program (its children stay in them).
func (s *cpuSide) Wrap(cmd *exec.Cmd) *exec.Cmd {
	script := ""
	for _, d := range s.dirs {
		script += "echo $$ > '" + filepath.Join(d, "cgroup.procs") + "' && "
	}
	w := exec.Command("/bin/sh", append([]string{"-c", script + `exec "$@"`, "sh", cmd.Path}, cmd.Args[1:]...)...)
	w.Env, w.Dir, w.Stdin, w.Stdout, w.Stderr = cmd.Env, cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr
	return w
}

// CPUSeconds returns the CPU time the processes now in the side have used
// (their threads included), from /proc: cgroup v1's cpu hierarchy has no
// usage counter of its own. Softirq work (the link's packets) done on the
// side's CPUs is counted where the kernel charges it, if at all.
func (s *cpuSide) CPUSeconds(t testing.TB) float64 {
	u, k := s.CPUTimes(t)
	return u + k
}

// CPUTimes returns the user and system CPU seconds of the processes now in
// the side.
func (s *cpuSide) CPUTimes(t testing.TB) (user, system float64) {
	t.Helper()
	procs, err := os.ReadFile(filepath.Join(s.dirs[0], "cgroup.procs"))
	if err != nil {
		t.Fatalf("cgroup %s: %v", s.Name, err)
	}
	for _, pid := range strings.Fields(string(procs)) {
		u, k, err := procCPUTimes(pid)
		if err != nil {
			continue // it exited
		}
		user += u
		system += k
	}
	return user, system
}

// procCPUTimes returns the user and system CPU seconds of process pid
// ("self" for this one), its threads included.
func procCPUTimes(pid string) (user, system float64, err error) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime and stime the 12th and 13th, in USER_HZ ticks.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %q", pid, stat)
	}
	u, err1 := strconv.Atoi(f[11])
	k, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %q", pid, stat)
	}
	return float64(u) / 100, float64(k) / 100, nil
}

// remove moves whatever still runs in the side to its parent and removes
// its cgroups.
func (s *cpuSide) remove() error {
	var errs []error
	for _, d := range s.dirs {
		errs = append(errs, removeCgroup(d))
	}
	return errors.Join(errs...)
}

func removeCgroup(d string) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(filepath.Dir(d), "cgroup.procs"), []byte(pid), 0)
			}
		}
		err := syscall.Rmdir(d)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeStaleCPUSides removes the cgroups of this test bed whose creating
// process is gone (a killed test run).
func removeStaleCPUSides(t testing.TB, roots []string) {
	for _, r := range roots {
		ents, _ := os.ReadDir(r)
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			if !ok || !e.IsDir() {
				continue
			}
			digits := rest[:len(rest)-len(strings.TrimLeft(rest, "0123456789"))]
			pid, err := strconv.Atoi(digits)
			if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
				continue
			}
			if err := removeCgroup(filepath.Join(r, e.Name())); err != nil {
				t.Logf("a stale test bed cgroup: %v", err)
			}
		}
	}
}

// leftCPUSides lists this process's cgroups of the test bed that exist.
func leftCPUSides(t testing.TB) []string {
	roots, _, err := cgroupRoots()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range roots {
		m, _ := filepath.Glob(filepath.Join(r, fmt.Sprintf("%s%d*", cgroupPrefix, os.Getpid())))
		left = append(left, m...)
	}
	return left
}

// TestTwoHostTestBed checks the test bed's processors: a process started
// in a side runs on that side's CPUs only and sees its quota (the
// profiles record both), a side at half a core gets about half a core
// however many threads spin, and nothing of the test bed (namespaces,
// cgroups) is left when it ends.
func TestTwoHostTestBed(t *testing.T) {
	var names []string
	t.Run("sides", func(t *testing.T) {
		l := newNetLink(t, 100)
		names = []string{l.Server, l.Client}
		sc, tc := splitCPUs(t)
		storage := newCPUSide(t, "storage", sc, 0.5)
		trainer := newCPUSide(t, "trainer", tc, 0)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		burn := func(side *cpuSide, ns string) (cpus string, quota, used float64) {
			cmd := side.Wrap(l.Command(ns, self, "-test.run=^TestNetnsHelperProcess$"))
			cmd.Env = append(os.Environ(), "FFTB_ROLE=burn", "GOMAXPROCS=4")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("burner in %s: %v\n%s", side.Name, err, out)
			}
			for _, ln := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(ln, "burned cpus=%s quota=%g cpu_per_s=%g", &cpus, &quota, &used); err == nil {
					return cpus, quota, used
				}
			}
			t.Fatalf("burner in %s said: %s", side.Name, out)
			return
		}
		c1, q1, u1 := burn(storage, l.Server)
		c2, q2, u2 := burn(trainer, l.Client)
		t.Logf("storage: cpus %s quota %.2f used %.2f cores; trainer: cpus %s quota %.2f used %.2f cores", c1, q1, u1, c2, q2, u2)
		if c1 != sc || c2 != tc || q1 != 0.5 || q2 != 0 {
			t.Errorf("the sides saw cpus %q quota %g and cpus %q quota %g; want %q 0.5 and %q 0", c1, q1, c2, q2, sc, tc)
		}
		ncpu := float64(strings.Count(tc, ",") + 1)
		if u1 < 0.3 || u1 > 0.65 || u2 < 0.7*ncpu || u2 > 1.1*ncpu {
			t.Errorf("4 spinning threads used %.2f cores at a quota of 0.5 and %.2f on %s", u1, u2, tc)
		}
	})
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s left behind", n)
		}
	}
	if left := leftCPUSides(t); len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}

// TestProfileSeesTheQuota: a server under a CPU quota of half a core
// profiles its model at its sustained rate, about twice the time it
// measures with the whole core, early segments included (timed alone,
// they ran in the quota's full-speed bursts: a split that trusted them
// ran at half its predicted rate on the test bed).
func TestProfileSeesTheQuota(t *testing.T) {
	// The server measures both profiles here, in a home of its own: the
	// default directory (~/.cache/featurefs/profiles) may hold ones a
	// benchmark measured under other load, and the test compared those
	// (2.76x to layer2, on a machine where it measures about 2x).
	t.Setenv("FEATUREFS_DEPS", testenv.DepsDir())
	// The lower bound is what the test is for (timed in the quota's
	// bursts, early prefixes read about 1x). Measured fresh on a loaded
	// 2-core machine, to layer2: 1.14, 1.26, 1.65, 1.71, 1.83, 1.93,
	// 2.04, 2.58 and 2.65x; the whole model 1.52-2.36x. The early prefix
	// sometimes reads low (1.14x in a whole-package run at b8656f9, 1.26x
	// alone): the profile's short timings can still fall inside the
	// quota's bursts (issue 51). A reading out of bounds is measured once
	// more on a fresh server and side; a server that ignored the quota
	// reads about 1x every time.
	//
	// Since a profile under a quota is the CPU time over the quota and
	// only runs that did not fault count (extractor/profile.go,
	// timeRuns), 5 fresh readings to layer2 were 1.92-2.28x and the whole
	// model 2.06-3.05x (its longest prefix has the fewest clean runs).
	ok := func(early, all float64) bool { return early >= 1.4 && all >= 1.4 && early <= 3.5 && all <= 3.5 }
	var early, all float64
	for attempt := 1; attempt <= 2; attempt++ {
		t.Run(fmt.Sprintf("attempt%d", attempt), func(t *testing.T) {
			early, all = profileQuotaRatios(t)
		})
		if t.Failed() || ok(early, all) {
			return
		}
	}
	t.Errorf("under half a core the profile is %.2fx (to layer2) and %.2fx (whole model) the whole core's, twice; want about 2x", early, all)
}

// profileQuotaRatios: a server on a storage side at half a core, its
// profile of ResNet-18 there and then at the whole core, and the ratios
// of the two (decode plus the prefix to layer2, and the whole model).
func profileQuotaRatios(t *testing.T) (early, all float64) {
	t.Setenv("HOME", t.TempDir())
	l := newNetLink(t, 1000)
	sc, _ := splitCPUs(t)
	storage := newCPUSide(t, "storage", sc, 0.5)
	model := "resnet18"
	url := startServeInSide(t, l, storage, t.TempDir(), "--model", model+"="+testenv.Model(t, model))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	profile := func() *split.Profile {
		t.Helper()
		cmd := l.Command(l.Client, self, "-test.run=^TestNetnsHelperProcess$")
		cmd.Env = append(os.Environ(), "FFTB_ROLE=get", "FFTB_URL="+url+"/v1/profile?model="+model)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GET /v1/profile: %v", err)
		}
		out = out[:bytes.LastIndexByte(out, '}')+1]
		var p split.Profile
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatalf("profile: %v: %.300s", err, out)
		}
		return &p
	}
	half := profile()
	storage.SetQuota(t, 0)
	whole := profile()
	if half.CPUQuota != 0.5 || whole.CPUQuota != 0 || half.CPUs != sc {
		t.Fatalf("profiles say quota %g and %g on CPUs %q; want 0.5, then none, on %q", half.CPUQuota, whole.CPUQuota, half.CPUs, sc)
	}
	at := func(p *split.Profile, k int) float64 { return p.DecodeSeconds + p.Layers[k].CumSeconds }
	early, all = at(half, 2)/at(whole, 2), at(half, len(half.Layers)-1)/at(whole, len(whole.Layers)-1)
	t.Logf("half a core / the whole core: %.2fx to layer2, %.2fx the whole model (ms per sample, half then whole: decode %.2f %.2f, to layer2 %.2f %.2f, whole model %.2f %.2f)",
		early, all, 1e3*half.DecodeSeconds, 1e3*whole.DecodeSeconds, 1e3*half.Layers[2].CumSeconds, 1e3*whole.Layers[2].CumSeconds,
		1e3*half.Layers[len(half.Layers)-1].CumSeconds, 1e3*whole.Layers[len(whole.Layers)-1].CumSeconds)
	return early, all
}
