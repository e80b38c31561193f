package test

// A network-limited test bed: a "storage" and a "trainer" network namespace
// joined by a veth pair whose both ends are shaped with tc tbf. Addresses
// are in 10.213.0.0/16 and exist only inside the two namespaces, so the
// traffic never leaves them. Processes run in a namespace with
// `nsenter --net=/run/netns/NAME` (only the network namespace: a FUSE mount
// made there is visible to the whole machine).

import (
	"bytes"
	"path/filepath"

	"bufio"
	"fmt"
	"github.com/featurefs/featurefs/extractor/split"
	"github.com/featurefs/featurefs/test/testenv"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsPrefix starts the names of the namespaces this file makes; the
// creating process's id follows, so stale ones can be told apart.
const netnsPrefix = "fftb"

// netLink is a shaped link between two namespaces.
type netLink struct {
	Server, Client     string // namespace names
	ServerIP, ClientIP string
	serverDev          string
	clientDev          string
	Mbit               int
}

func runCmd(t testing.TB, name string, args ...string) {
	t.Helper()
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
}

// removeStaleNetns deletes namespaces of this test bed whose creating
// process is gone (a killed test run).
func removeStaleNetns(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v (install iproute2)", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], netnsPrefix) {
			continue
		}
		rest := strings.TrimPrefix(f[0], netnsPrefix)
		digits := rest[:len(rest)-len(strings.TrimLeft(rest, "0123456789"))]
		pid, err := strconv.Atoi(digits)
		if err != nil {
			continue
		}
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// newNetLink makes the two namespaces and the veth pair, shaped to mbit
// Mbit/s in both directions, and removes them when the test ends.
func newNetLink(t testing.TB, mbit int) *netLink {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the network test bed needs root (ip netns, tc)")
	}
	removeStaleNetns(t)
	pid := os.Getpid()
	seq := int(time.Now().UnixNano() % 1000)
	l := &netLink{
		Server:    fmt.Sprintf("%s%ds%d", netnsPrefix, pid, seq),
		Client:    fmt.Sprintf("%s%dc%d", netnsPrefix, pid, seq),
		serverDev: fmt.Sprintf("ffs%d", seq),
		clientDev: fmt.Sprintf("ffc%d", seq),
		Mbit:      mbit,
	}
	sub := (pid + seq) % 250
	l.ServerIP = fmt.Sprintf("10.213.%d.1", sub)
	l.ClientIP = fmt.Sprintf("10.213.%d.2", sub)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", l.Server).Run()
		exec.Command("ip", "netns", "del", l.Client).Run()
	})
	runCmd(t, "ip", "netns", "add", l.Server)
	runCmd(t, "ip", "netns", "add", l.Client)
	runCmd(t, "ip", "link", "add", l.serverDev, "netns", l.Server, "type", "veth", "peer", "name", l.clientDev, "netns", l.Client)
	for _, c := range [][]string{
		{l.Server, "ip", "addr", "add", l.ServerIP + "/30", "dev", l.serverDev},
		{l.Client, "ip", "addr", "add", l.ClientIP + "/30", "dev", l.clientDev},
		{l.Server, "ip", "link", "set", l.serverDev, "up"},
		{l.Client, "ip", "link", "set", l.clientDev, "up"},
		{l.Server, "ip", "link", "set", "lo", "up"},
		{l.Client, "ip", "link", "set", "lo", "up"},
	} {
		runCmd(t, "ip", append([]string{"netns", "exec", c[0]}, c[1:]...)...)
	}
	// Permanent neighbour entries: no ARP on the shaped link. (They were
	// added when TestSplitReplan's link, re-shaped from 1000 to 25 Mbit/s
	// under load, lost its neighbours, "no route to host": that was the
	// GSO wedge below, which blocked ARP as it blocked data.)
	mac := func(ns, dev string) string {
		out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+dev+"/address").Output()
		if err != nil {
			t.Fatalf("the MAC address of %s in %s: %v", dev, ns, err)
		}
		return strings.TrimSpace(string(out))
	}
	sm, cm := mac(l.Server, l.serverDev), mac(l.Client, l.clientDev)
	runCmd(t, "ip", "netns", "exec", l.Server, "ip", "neigh", "replace", l.ClientIP, "lladdr", cm, "dev", l.serverDev, "nud", "permanent")
	runCmd(t, "ip", "netns", "exec", l.Client, "ip", "neigh", "replace", l.ServerIP, "lladdr", sm, "dev", l.clientDev, "nud", "permanent")
	// GSO packets no larger than 16 KB, half the smallest tbf burst
	// (shape): tbf never sends a packet larger than its burst, and a 64
	// KB one queued at 1000 Mbit/s (burst 500 KB) wedged the link for
	// good when it was re-shaped to 25 Mbit/s (burst 32 KB): TestSplitReplan
	// in CI lost every answer and every SYN-ACK for 2 minutes
	// (TestNetnsLinkIsShaped drops the rate under load).
	for _, e := range [][2]string{{l.Server, l.serverDev}, {l.Client, l.clientDev}} {
		runCmd(t, "ip", "netns", "exec", e[0], "ip", "link", "set", "dev", e[1], "gso_max_size", strconv.Itoa(linkGSOMax))
	}
	l.shape(t, "add", mbit)
	return l
}

// linkGSOMax is the largest GSO packet the test bed's veth ends build.
const linkGSOMax = 16 << 10

// shape adds or changes the tbf qdisc of both ends.
func (l *netLink) shape(t testing.TB, verb string, mbit int) {
	t.Helper()
	// burst: at least rate/HZ; 64 KB keeps tbf accurate at 1 Gbit/s; at
	// least twice linkGSOMax, as a rate change keeps the queued packets.
	burst := max(2*linkGSOMax, mbit*1000*1000/8/250)
	for _, e := range [][2]string{{l.Server, l.serverDev}, {l.Client, l.clientDev}} {
		runCmd(t, "ip", "netns", "exec", e[0], "tc", "qdisc", verb, "dev", e[1], "root", "tbf",
			"rate", fmt.Sprintf("%dmbit", mbit), "burst", strconv.Itoa(burst), "latency", "400ms")
	}
	l.Mbit = mbit
}

// SetRate changes the link's bandwidth.
func (l *netLink) SetRate(t testing.TB, mbit int) { l.shape(t, "change", mbit) }

// Command returns a command that runs in namespace ns.
func (l *netLink) Command(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", name}, args...)...)
}

// measureLink sends n bytes from the server namespace to the client one
// with a small TCP pair (the test binary itself, re-run under nsenter) and
// returns the rate in Mbit/s.
func measureLink(t testing.TB, l *netLink, n int) float64 {
	t.Helper()
	return sendOverLink(t, l, n, 0, nil)
}

// sendOverLink is measureLink that calls at once the server's end has
// sent after bytes (read from its qdisc's counter), and fails the test if
// the transfer has not ended within 60 s.
func sendOverLink(t testing.TB, l *netLink, n, after int, at func()) float64 {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(l.ServerIP, "7099")
	srv := l.Command(l.Server, self, "-test.run=^TestNetnsHelperProcess$")
	srv.Env = append(os.Environ(), "FFTB_ROLE=send", "FFTB_ADDR="+addr, "FFTB_BYTES="+strconv.Itoa(n))
	stdout, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	// Wait for "listening".
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "listening") {
		t.Fatalf("sender: %q %v", line, err)
	}
	cli := l.Command(l.Client, self, "-test.run=^TestNetnsHelperProcess$")
	cli.Env = append(os.Environ(), "FFTB_ROLE=recv", "FFTB_ADDR="+addr)
	var out bytes.Buffer
	cli.Stdout, cli.Stderr = &out, &out
	sent0 := l.sent(t)
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	wait := make(chan error, 1)
	go func() { wait <- cli.Wait() }()
	deadline := time.After(60 * time.Second)
	// The qdisc's counter is read (a tc process) only while at waits.
	var pollC <-chan time.Time
	if at != nil {
		poll := time.NewTicker(5 * time.Millisecond)
		defer poll.Stop()
		pollC = poll.C
	}
	for done := false; !done; {
		select {
		case err := <-wait:
			if err != nil {
				t.Fatalf("receiver: %v\n%s", err, out.String())
			}
			done = true
		case <-deadline:
			cli.Process.Kill()
			t.Fatalf("%d bytes not through the link in 60 s (%d sent by its qdisc): the link is wedged", n, l.sent(t)-sent0)
		case <-pollC:
			if l.sent(t)-sent0 >= int64(after) {
				at()
				pollC = nil
			}
		}
	}
	var got int
	var secs float64
	for _, ln := range strings.Split(out.String(), "\n") {
		if _, err := fmt.Sscanf(ln, "received %d bytes in %g s", &got, &secs); err == nil {
			break
		}
	}
	if got != n || secs <= 0 {
		t.Fatalf("receiver: %s", out.String())
	}
	srv.Wait()
	return float64(got) * 8 / secs / 1e6
}

// sent returns the bytes the server end's qdisc has sent.
func (l *netLink) sent(t testing.TB) int64 {
	t.Helper()
	b, err := exec.Command("ip", "netns", "exec", l.Server, "tc", "-s", "qdisc", "show", "dev", l.serverDev).CombinedOutput()
	if err != nil {
		t.Fatalf("tc -s qdisc show dev %s: %v\n%s", l.serverDev, err, b)
	}
	_, rest, ok := strings.Cut(string(b), "Sent ")
	var v int64
	if _, err := fmt.Sscanf(rest, "%d", &v); !ok || err != nil {
		t.Fatalf("tc -s qdisc show dev %s: no byte counter in %q", l.serverDev, b)
	}
	return v
}

// TestNetnsHelperProcess is the sender or receiver of measureLink when run
// with FFTB_ROLE; otherwise it does nothing.
func TestNetnsHelperProcess(t *testing.T) {
	addr := os.Getenv("FFTB_ADDR")
	switch os.Getenv("FFTB_ROLE") {
	case "send":
		n, _ := strconv.Atoi(os.Getenv("FFTB_BYTES"))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("listening")
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for n > 0 {
			k, err := c.Write(buf[:min(n, len(buf))])
			if err != nil {
				t.Fatal(err)
			}
			n -= k
		}
		c.Close()
	case "get": // GET FFTB_URL and print the body
		resp, err := http.Get(os.Getenv("FFTB_URL"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
			t.Fatal(err)
		}
	case "burn": // spin every P for a second; say where and how much
		var ru0, ru1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		t0 := time.Now()
		done := make(chan struct{})
		for range runtime.GOMAXPROCS(0) {
			go func() {
				for x := 0; ; x++ {
					select {
					case <-done:
						return
					default:
					}
				}
			}()
		}
		time.Sleep(time.Second)
		close(done)
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		fmt.Printf("burned cpus=%s quota=%g cpu_per_s=%g\n", split.ProcessCPUs(), split.ProcessCPUQuota(), cpu.Seconds()/time.Since(t0).Seconds())
	case "recv":
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var first [1]byte
		if _, err := io.ReadFull(c, first[:]); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("received %d bytes in %g s\n", n+1, time.Since(start).Seconds())
	}
}

// TestNetnsLinkIsShaped checks the test bed: the link carries about the
// configured rate, a rate change takes effect, and the namespaces are gone
// after the test.
func TestNetnsLinkIsShaped(t *testing.T) {
	var names []string
	t.Run("shaped", func(t *testing.T) {
		l := newNetLink(t, 50)
		names = []string{l.Server, l.Client}
		r50 := measureLink(t, l, 2<<20)
		if r50 < 0.6*50 || r50 > 1.15*50 {
			t.Errorf("50 Mbit/s link carried %.1f Mbit/s", r50)
		}
		l.SetRate(t, 200)
		r200 := measureLink(t, l, 8<<20)
		if r200 < 0.6*200 || r200 > 1.15*200 || r200 < 2.5*r50 {
			t.Errorf("200 Mbit/s link carried %.1f Mbit/s (50: %.1f)", r200, r50)
		}
		t.Logf("measured %.1f Mbit/s at 50, %.1f at 200", r50, r200)
		// A rate dropped under load: tbf never sends a packet larger
		// than its burst, and a 64 KB GSO packet queued at 1000 Mbit/s
		// (burst 500 KB) wedged the link for good once it was re-shaped
		// to 25 (burst 32 KB): TestSplitReplan in CI, every answer lost
		// for 2 minutes. 48 MB, the rate dropped to 60 Mbit/s after 16.
		l.SetRate(t, 1000)
		r := sendOverLink(t, l, 48<<20, 16<<20, func() { l.SetRate(t, 60) })
		t.Logf("48 MB with the rate dropped from 1000 to 60 Mbit/s after 16: %.1f Mbit/s", r)
	})
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s left behind", n)
		}
	}
}

// startServeIn runs `featurefs serve --no-auth` over dir in the link's
// server namespace and returns its URL once it listens.
func startServeIn(t *testing.T, l *netLink, dir string, args ...string) string {
	t.Helper()
	return startServeInSide(t, l, nil, dir, args...)
}

// startServeInSide is startServeIn with the server in side's cgroups (its
// own CPUs, maybe a quota), or in this process's when side is nil.
func startServeInSide(t *testing.T, l *netLink, side *cpuSide, dir string, args ...string) string {
	t.Helper()
	work := t.TempDir()
	full := append([]string{"serve", "--listen", l.ServerIP + ":7070", "--no-auth",
		"--model", modelName + "=" + testenv.Model(t, modelName), "--cache-dir", filepath.Join(work, "cache"),
		"--ort-lib", testenv.ORTLib(t), "--device", "cpu", "--log-level", "debug"}, args...)
	cmd := l.Command(l.Server, featurefsBin(t), append(full, dir)...)
	if side != nil {
		cmd = side.Wrap(cmd)
	}
	logPath := filepath.Join(work, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("featurefs serve log:\n%s", tail(logPath, 6000))
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if strings.Contains(tail(logPath, 1<<20), "listening on") {
			return "http://" + l.ServerIP + ":7070"
		}
		select {
		case <-exited:
			t.Fatalf("featurefs serve exited:\n%s", tail(logPath, 6000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("featurefs serve not listening after 3m:\n%s", tail(logPath, 6000))
		}
	}
}

// mountIn runs `featurefs mount --foreground --remote url` with the test
// model in the link's client namespace and unmounts it when the test ends.
func mountIn(t *testing.T, l *netLink, url string, args ...string) *mounted {
	t.Helper()
	work := t.TempDir()
	m := &mounted{Dir: filepath.Join(work, "mnt"), CacheDir: filepath.Join(work, "cache"), Log: filepath.Join(work, "mount.log"), exited: make(chan struct{})}
	if err := os.Mkdir(m.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	full := append([]string{"mount", "--foreground", "--remote", url, "--model", modelName + "=" + testenv.Model(t, modelName),
		"--cache-dir", m.CacheDir, "--ort-lib", testenv.ORTLib(t), "--device", "cpu", "--log-level", "debug"}, args...)
	m.cmd = l.Command(l.Client, featurefsBin(t), append(full, m.Dir)...)
	logf, err := os.Create(m.Log)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.waitErr = m.cmd.Wait(); logf.Close(); close(m.exited) }()
	t.Cleanup(func() {
		m.Unmount(t)
		if t.Failed() {
			t.Logf("featurefs mount log:\n%s", tail(m.Log, 6000))
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); !isMounted(t, m.Dir); {
		select {
		case <-m.exited:
			t.Fatalf("featurefs mount exited before mounting (%v):\n%s", m.waitErr, tail(m.Log, 6000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("featurefs mount: not mounted after 3m:\n%s", tail(m.Log, 6000))
		}
	}
	m.ready = true
	return m
}
