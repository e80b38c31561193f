package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/featurefs/featurefs/test/testenv"
)

// This file runs the pods of docs/kubernetes in a real container runtime:
// Debian's podman with runc, the way scripts/install-deps.sh installs it.
// Each manifest's pod template is read from its file and turned into
// `podman run` calls (kubePod.run) that do what a kubelet does with it:
// the volumes as Kubernetes makes them (an emptyDir 0777, a hostPath
// DirectoryOrCreate root 0755, a Secret's files root-owned with its
// defaultMode and, under an fsGroup, group-readable by it, a claim
// bound to a directory, each bind-mounted), the user and groups, the
// capabilities, privileged and no-new-privileges, the mount propagation
// (the kubelet's pod directories are shared mounts), the environment from
// Secrets and $(VAR) expansion in arguments, the probes, a native
// sidecar's start before the other containers, and a stop by SIGTERM
// with the pod's grace period. The only changes to what the file says:
// the object store's address (MinIO on this host's loopback; the pods use
// the host's network, which stands for the pod network and its hostPort),
// the serve port (a free one), the number of the Job's parts (2), and the
// trainer's image, which the manifest leaves to the reader (a stand-in
// that reads the tree, test/podtrainer).

// k8sManifestsDir is docs/kubernetes.
func k8sManifestsDir(t testing.TB) string {
	return filepath.Join(testenv.RepoRoot(t), "docs", "kubernetes")
}

// manifestPodSpec reads file (in docs/kubernetes) and returns its pod
// template: a Pod's spec, a Job's or a DaemonSet's template's.
func manifestPodSpec(t testing.TB, file string) (corev1.PodSpec, any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sManifestsDir(t), file))
	if err != nil {
		t.Fatal(err)
	}
	var tm struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &tm); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	switch tm.Kind {
	case "Pod":
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return p.Spec, &p
	case "Job":
		var j batchv1.Job
		if err := yaml.UnmarshalStrict(b, &j); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return j.Spec.Template.Spec, &j
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(b, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return d.Spec.Template.Spec, &d
	}
	t.Fatalf("%s: kind %q: no pod template known", file, tm.Kind)
	return corev1.PodSpec{}, nil
}

// podman runs the podman CLI with a private store under a test directory
// and the settings these machines need (runc, cgroupfs, no default
// ulimits: docs/KUBERNETES.md, "Testing").
type podman struct {
	t    testing.TB
	dir  string
	base []string // global flags
	env  []string
}

// newPodman returns a podman with an empty store; its containers, images
// and store are removed when the test ends. A machine without podman
// fails the test: scripts/install-deps.sh installs it.
func newPodman(t testing.TB) *podman {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the pod tests run containers with mounts and devices as root: run as root")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: scripts/install-deps.sh installs it (apt: podman runc)")
	}
	dir, err := os.MkdirTemp("", "featurefs-podman-")
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(podmanConf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &podman{t: t, dir: dir,
		base: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
			"--runtime", "runc", "--cgroup-manager", "cgroupfs"},
		env: append(os.Environ(), "CONTAINERS_CONF="+conf)}
	t.Cleanup(func() {
		p.cmd(context.Background(), "rm", "--all", "--force", "--time", "0").Run()
		p.cmd(context.Background(), "system", "reset", "--force").Run()
		syscall.Unmount(filepath.Join(dir, "root", "overlay"), syscall.MNT_DETACH)
		os.RemoveAll(dir)
	})
	return p
}

// podmanConf is the containers.conf of these machines: crun fails with
// "cgroups in hybrid mode not supported" and the default ulimits fail
// setrlimit, so runc, cgroupfs and none.
const podmanConf = `[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`

func (p *podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, "podman", append(slices.Clone(p.base), args...)...)
	c.Env = p.env
	return c
}

// run runs podman args to its end within limit and returns its stdout;
// a failure fails the test.
func (p *podman) run(limit time.Duration, args ...string) string {
	p.t.Helper()
	out, err := p.try(limit, args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// try is run that returns the failure.
func (p *podman) try(limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var stdout, stderr bytes.Buffer
	c := p.cmd(ctx, args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%w\n%s", err, lastBytes(stderr.String(), 2000))
	}
	return stdout.String(), nil
}

// fuseDevice returns a device node for /dev/fuse's device, 0666 as on
// a node whose udev made it (a container runtime copies a device's mode
// from the node's).
func (p *podman) fuseDevice(t testing.TB) string {
	t.Helper()
	dev := filepath.Join(p.dir, "fuse")
	if _, err := os.Stat(dev); err == nil {
		return dev
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/fuse", &st); err != nil {
		t.Fatalf("/dev/fuse: %v", err)
	}
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, int(st.Rdev)); err != nil {
		t.Fatalf("mknod %s: %v", dev, err)
	}
	if err := os.Chmod(dev, 0o666); err != nil {
		t.Fatal(err)
	}
	return dev
}

// loadImage loads the image make image builds (scripts/mkimage) and a
// trainer stand-in, trainer:latest: test/podtrainer, static, as user
// 1000, in an image of its own.
func (p *podman) loadImages(t testing.TB) {
	t.Helper()
	tar := filepath.Join(p.dir, "featurefs-image.tar")
	buildImage(t, tar)
	p.run(3*time.Minute, "load", "-q", "-i", tar)
	if out := p.run(time.Minute, "images", "--format", "{{.Repository}}:{{.Tag}}"); !strings.Contains(out, "featurefs:latest") {
		t.Fatalf("podman load of the image gave no featurefs:latest:\n%s", out)
	}
	root := filepath.Join(p.dir, "trainer-root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(testenv.GoTool(t), "build", "-trimpath", "-o", filepath.Join(root, "podtrainer"), "./test/podtrainer")
	build.Dir = testenv.RepoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the trainer stand-in: %v\n%s", err, b)
	}
	ttar := filepath.Join(p.dir, "trainer.tar")
	if b, err := exec.Command("tar", "-C", root, "-cf", ttar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	p.run(time.Minute, "import", "--change", "USER=1000", "--change", `ENTRYPOINT ["/podtrainer"]`, ttar, "trainer:latest")
}

// podEnv is what a cluster would give a pod: Secrets, bound claims, the
// node's directories, and the test's few changes to the manifest.
type podEnv struct {
	secrets map[string]map[string]string // name -> key -> value
	claims  map[string]string            // claim name -> directory
	node    string                       // where hostPath volumes live (NODE/path)
	env     map[string]string            // the Job's JOB_COMPLETION_INDEX, for one
	// args rewrites each argument (the object store's address, ports).
	args func(string) string
	// container rewrites a container before it runs (the trainer's image).
	container func(*corev1.Container)
}

// kubePod is one pod running.
type kubePod struct {
	p       *podman
	name    string
	spec    corev1.PodSpec
	vols    map[string]string // volume name -> host directory
	shared  []string          // directories made shared mounts
	order   []string          // containers started, in order
	sidecar map[string]bool
}

// startPod starts spec's containers as a kubelet would: volumes made,
// native sidecars (init containers with restartPolicy Always) started and
// their startup probes waited for, other init containers run to their
// end, then the containers, each readiness probe waited for.
func (p *podman) startPod(t testing.TB, name string, spec corev1.PodSpec, env podEnv) *kubePod {
	t.Helper()
	k := &kubePod{p: p, name: name, spec: spec, vols: map[string]string{}, sidecar: map[string]bool{}}
	t.Cleanup(k.cleanup)
	base := filepath.Join(p.dir, "pods", name)
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, v := range spec.Volumes {
		dir := filepath.Join(base, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			mkdirMode(t, dir, 0o777) // the kubelet's emptyDir: 0777
		case v.HostPath != nil:
			dir = filepath.Join(env.node, v.HostPath.Path)
			if _, err := os.Stat(dir); err != nil {
				if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
					t.Fatalf("pod %s: hostPath %s missing and not DirectoryOrCreate", name, v.HostPath.Path)
				}
				mkdirMode(t, dir, 0o755) // the kubelet creates it root 0755
			}
		case v.Secret != nil:
			data, ok := env.secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("pod %s: no Secret %s", name, v.Secret.SecretName)
			}
			mode := os.FileMode(0o644)
			if v.Secret.DefaultMode != nil {
				mode = os.FileMode(*v.Secret.DefaultMode)
			}
			gid := 0
			if psc.FSGroup != nil {
				// The kubelet gives an fsGroup the Secret's files: group
				// ownership and read (SetVolumeOwnership, read-only).
				gid, mode = int(*psc.FSGroup), mode|0o440
			}
			mkdirMode(t, dir, 0o755)
			for key, val := range data {
				f := filepath.Join(dir, key)
				if err := os.WriteFile(f, []byte(val), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(f, 0, gid); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(f, mode); err != nil {
					t.Fatal(err)
				}
			}
		case v.PersistentVolumeClaim != nil:
			d, ok := env.claims[v.PersistentVolumeClaim.ClaimName]
			if !ok {
				t.Fatalf("pod %s: no volume bound to claim %s", name, v.PersistentVolumeClaim.ClaimName)
			}
			dir = d
		default:
			t.Fatalf("pod %s: volume %s of a kind this test does not make", name, v.Name)
		}
		k.vols[v.Name] = dir
	}
	// A Bidirectional or HostToContainer mount needs its source on a
	// shared mount, as the kubelet's pod directories are.
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.MountPropagation == nil || *m.MountPropagation == corev1.MountPropagationNone || slices.Contains(k.shared, k.vols[m.Name]) {
				continue
			}
			dir := k.vols[m.Name]
			if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
				t.Fatalf("bind %s: %v", dir, err)
			}
			k.shared = append(k.shared, dir)
			if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
				t.Fatalf("make-shared %s: %v", dir, err)
			}
		}
	}
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			k.sidecar[c.Name] = true
			k.start(t, c, psc, env)
			k.waitProbe(t, c, c.StartupProbe)
			continue
		}
		k.start(t, c, psc, env)
		if code := k.wait(t, c.Name, 5*time.Minute); code != 0 {
			t.Fatalf("pod %s: init container %s exited %d:\n%s", name, c.Name, code, k.logs(c.Name))
		}
	}
	for _, c := range spec.Containers {
		k.start(t, c, psc, env)
	}
	for _, c := range spec.Containers {
		k.waitProbe(t, c, c.StartupProbe)
		k.waitProbe(t, c, c.ReadinessProbe)
	}
	return k
}

func mkdirMode(t testing.TB, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// ctrName is the podman name of container c of the pod.
func (k *kubePod) ctrName(c string) string { return k.name + "-" + c }

// start runs container c detached.
func (k *kubePod) start(t testing.TB, c corev1.Container, psc *corev1.PodSecurityContext, env podEnv) {
	t.Helper()
	if env.container != nil {
		env.container(&c)
	}
	args := []string{"run", "--detach", "--name", k.ctrName(c.Name), "--network", "host", "--pull", "never"}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid, gid := sc.RunAsUser, sc.RunAsGroup
	if uid == nil {
		uid = psc.RunAsUser
	}
	if gid == nil {
		gid = psc.RunAsGroup
	}
	if uid != nil {
		u := strconv.FormatInt(*uid, 10)
		if gid != nil {
			u += ":" + strconv.FormatInt(*gid, 10)
		}
		args = append(args, "--user", u)
	}
	if psc.FSGroup != nil {
		args = append(args, "--group-add", strconv.FormatInt(*psc.FSGroup, 10))
	}
	if sc.Privileged != nil && *sc.Privileged {
		args = append(args, "--privileged")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop", string(cp))
		}
		for _, cp := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(cp))
		}
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	for res, q := range c.Resources.Limits {
		switch {
		case res == corev1.ResourceMemory:
			args = append(args, "--memory", strconv.FormatInt(q.Value(), 10))
		case strings.HasSuffix(string(res), "/fuse"):
			// As a FUSE device plugin gives it: the node's /dev/fuse,
			// 0666 as udev makes it (this machine's is 0600, which keeps
			// fusermount3, opening it as the calling user, out).
			args = append(args, "--device", k.p.fuseDevice(t)+":/dev/fuse")
		}
	}
	vars := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			t.Fatalf("container %s: envFrom other than a Secret", c.Name)
		}
		data, ok := env.secrets[ef.SecretRef.Name]
		if !ok {
			t.Fatalf("container %s: no Secret %s", c.Name, ef.SecretRef.Name)
		}
		for key, val := range data {
			vars[key] = val
		}
	}
	for key, val := range env.env {
		vars[key] = val
	}
	for _, e := range c.Env {
		vars[e.Name] = e.Value
	}
	for key, val := range vars {
		args = append(args, "--env", key+"="+val)
	}
	for _, m := range c.VolumeMounts {
		src, ok := k.vols[m.Name]
		if !ok {
			t.Fatalf("container %s mounts volume %s, which the pod lacks", c.Name, m.Name)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
		}
		opts := []string{}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		switch deref(m.MountPropagation) {
		case corev1.MountPropagationBidirectional:
			opts = append(opts, "rshared")
		case corev1.MountPropagationHostToContainer:
			opts = append(opts, "rslave")
		default:
			opts = append(opts, "rprivate")
		}
		args = append(args, "--volume", src+":"+m.MountPath+":"+strings.Join(opts, ","))
	}
	if len(c.Command) > 0 {
		ep, _ := json.Marshal(c.Command[:1])
		args = append(args, "--entrypoint", string(ep))
	}
	args = append(args, c.Image)
	line := slices.Clone(c.Args)
	if len(c.Command) > 1 {
		line = append(slices.Clone(c.Command[1:]), line...)
	}
	for i, a := range line {
		for key, val := range vars { // Kubernetes expands $(VAR) in command and args
			a = strings.ReplaceAll(a, "$("+key+")", val)
		}
		if env.args != nil {
			a = env.args(a)
		}
		line[i] = a
	}
	k.p.run(2*time.Minute, append(args, line...)...)
	k.order = append(k.order, c.Name)
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// waitProbe waits until probe succeeds (an exec in the container, or an
// HTTP GET on the host's network), within its failure threshold times its
// period, and fails the test otherwise.
func (k *kubePod) waitProbe(t testing.TB, c corev1.Container, probe *corev1.Probe) {
	t.Helper()
	if probe == nil {
		return
	}
	period := time.Duration(max(probe.PeriodSeconds, 1)) * time.Second
	tries := int(max(probe.FailureThreshold, 3))
	if probe.HTTPGet != nil {
		period = min(period, 500*time.Millisecond) // as often as we like: the pod is the same
		tries *= int(time.Duration(max(probe.PeriodSeconds, 1)) * time.Second / period)
	}
	var last string
	for range tries {
		switch {
		case probe.Exec != nil:
			out, err := k.p.try(30*time.Second, append([]string{"exec", k.ctrName(c.Name)}, probe.Exec.Command...)...)
			if err == nil {
				return
			}
			last = out + err.Error()
		case probe.HTTPGet != nil:
			port := probe.HTTPGet.Port.IntValue()
			for _, p := range c.Ports {
				if p.Name == probe.HTTPGet.Port.String() {
					port = int(p.HostPort)
				}
			}
			out, err := exec.Command("curl", "-fsS", "--max-time", "5", fmt.Sprintf("http://127.0.0.1:%d%s", port, probe.HTTPGet.Path)).CombinedOutput()
			if err == nil {
				return
			}
			last = string(out) + err.Error()
		default:
			t.Fatalf("container %s: a probe of a kind this test does not run", c.Name)
		}
		// created or initialized: still starting (a loaded machine).
		if st := k.state(c.Name); st == "exited" || st == "stopped" || st == "dead" {
			t.Fatalf("pod %s: container %s is %s before its probe passed:\n%s", k.name, c.Name, st, k.logs(c.Name))
		}
		time.Sleep(period)
	}
	t.Fatalf("pod %s: container %s's probe never passed (%d tries): %s\n%s", k.name, c.Name, tries, last, k.logs(c.Name))
}

// state is the container's state (running, exited, ...).
func (k *kubePod) state(c string) string {
	out, err := k.p.try(time.Minute, "inspect", "--format", "{{.State.Status}}", k.ctrName(c))
	if err != nil {
		return "unknown: " + err.Error()
	}
	return strings.TrimSpace(out)
}

// wait waits for container c to exit, within limit, and returns its exit
// code.
func (k *kubePod) wait(t testing.TB, c string, limit time.Duration) int {
	t.Helper()
	out, err := k.p.try(limit, "wait", k.ctrName(c))
	if err != nil {
		t.Fatalf("pod %s: container %s still running after %v (%v):\n%s", k.name, c, limit, err, k.logs(c))
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("podman wait: %q", out)
	}
	return code
}

// logs is the container's output (stdout and stderr).
func (k *kubePod) logs(c string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := k.p.cmd(ctx, "logs", k.ctrName(c)).CombinedOutput()
	return lastBytes(string(out), 4000)
}

// stop stops the pod as the kubelet does: the containers in reverse
// order of their start (native sidecars after the others), each sent
// SIGTERM and given the pod's grace period, then SIGKILL. It returns each
// container's exit code and how long its stop took.
func (k *kubePod) stop(t testing.TB) (map[string]int, map[string]time.Duration) {
	t.Helper()
	codes, took := map[string]int{}, map[string]time.Duration{}
	for i := len(k.order) - 1; i >= 0; i-- {
		c := k.order[i]
		codes[c], took[c] = k.stopOne(t, c)
	}
	return codes, took
}

// grace is the pod's termination grace period.
func (k *kubePod) grace() time.Duration {
	if g := k.spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second // Kubernetes' default
}

// stopOne stops container c (SIGTERM, the grace period, SIGKILL) and
// returns its exit code and how long the stop took.
func (k *kubePod) stopOne(t testing.TB, c string) (int, time.Duration) {
	t.Helper()
	grace := k.grace()
	start := time.Now()
	if _, err := k.p.try(grace+time.Minute, "stop", "--time", strconv.Itoa(int(grace/time.Second)), k.ctrName(c)); err != nil {
		t.Errorf("pod %s: podman stop %s: %v", k.name, c, err)
	}
	took := time.Since(start)
	return k.wait(t, c, time.Minute), took
}

// cleanup removes the pod's containers and the shared mounts made for it.
func (k *kubePod) cleanup() {
	for _, c := range k.order {
		k.p.try(time.Minute, "rm", "--force", "--time", "0", k.ctrName(c))
	}
	for _, d := range k.shared {
		syscall.Unmount(d, syscall.MNT_DETACH)
	}
}

// fuseMountsUnder lists the FUSE mounts at or under dir in this (the
// host's) mount namespace.
func fuseMountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if len(f) < 5 || i < 0 || i+1 >= len(f) || !strings.HasPrefix(f[i+1], "fuse") {
			continue
		}
		if mp := unescapeMountinfo(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// clusterFixture is what the manifests' pods share: MinIO with the source
// bucket (imagenet) and the feature store's (features), the model claim,
// the Secrets, the images loaded, and each image's layer12 feature as
// the host's featurefs extract computes it.
type clusterFixture struct {
	p       *podman
	minio   *testenv.MinIO
	env     podEnv
	want    map[string][]byte // feature path under the layer -> bytes
	token   string
	endpURL string
}

const manifestEndpoint = "http://minio.minio.svc:9000"

func newClusterFixture(t *testing.T) *clusterFixture {
	t.Helper()
	p := newPodman(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.loadImages(t) }()
	ds := genDataset(t, "--classes", "2", "--train", "3", "--val", "1", "--formats", "jpg", "--max-side", "300")
	m, _ := minioBucket(t, "imagenet", "", ds.Dir)
	m.CreateBucket(t, "features")
	model := testenv.Model(t, "resnet50")
	models := filepath.Join(t.TempDir(), "models")
	mkdirMode(t, models, 0o755)
	if b, err := os.ReadFile(model); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(models, "resnet50.onnx"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The reference: the host binary's features of every image.
	ref := filepath.Join(t.TempDir(), "ref")
	var imgs []string
	for _, o := range ds.images("") {
		imgs = append(imgs, filepath.Join(ds.Dir, o.Key))
	}
	if r := runCLI(t, 5*time.Minute, nil, append([]string{"extract", "--model", model, "--layer", "layer12", "--device", "cpu",
		"--relative-to", ds.Dir, "-o", ref}, imgs...)...); r.Code != 0 {
		t.Fatalf("extract: %s", r)
	}
	want := map[string][]byte{}
	filepath.WalkDir(ref, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".npy") {
			rel, _ := filepath.Rel(ref, p)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			want[rel] = b
		}
		return err
	})
	if len(want) != len(imgs) || len(imgs) == 0 {
		t.Fatalf("extract wrote %d features for %d images", len(want), len(imgs))
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	token := "test-token-" + strconv.Itoa(os.Getpid())
	endp := m.Endpoint
	return &clusterFixture{p: p, minio: m, want: want, token: token, endpURL: endp,
		env: podEnv{
			secrets: map[string]map[string]string{
				"featurefs-s3": {"AWS_ACCESS_KEY_ID": m.AccessKey, "AWS_SECRET_ACCESS_KEY": m.SecretKey,
					"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"},
				"featurefs-token": {"token": token + "\n"},
			},
			claims: map[string]string{"featurefs-models": models},
			node:   filepath.Join(p.dir, "node"),
			args: func(a string) string {
				return strings.ReplaceAll(a, manifestEndpoint, endp)
			},
		}}
}

// storeKeys lists the feature store's .npy objects.
func (f *clusterFixture) storeKeys(t testing.TB) []string {
	t.Helper()
	var keys []string
	pg := s3.NewListObjectsV2Paginator(f.minio.Client(), &s3.ListObjectsV2Input{Bucket: aws.String("features")})
	for pg.HasMorePages() {
		page, err := pg.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); strings.HasSuffix(k, ".npy") {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// TestKubernetesPodsInPodman runs every manifest of docs/kubernetes, in
// the order a cluster would: the warm Job fills the feature store (two
// indexes, disjoint and covering, each feature the host binary's), the
// serve DaemonSet's pod answers /healthz and a --remote mount on the host
// reads its features, and the training pod's native sidecar mounts the
// store on its volume, where the unprivileged trainer reads every
// feature; stopped, the sidecar exits 0 within the grace period and
// leaves no mount behind.
func TestKubernetesPodsInPodman(t *testing.T) {
	f := newClusterFixture(t)
	files, err := filepath.Glob(filepath.Join(k8sManifestsDir(t), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	t.Run("warm-job", func(t *testing.T) { ran["warm-job.yaml"] = true; runWarmJob(t, f) })
	t.Run("serve-daemonset", func(t *testing.T) { ran["serve-daemonset.yaml"] = true; runServeDaemonSet(t, f) })
	t.Run("training-pod-sidecar", func(t *testing.T) { ran["training-pod-sidecar.yaml"] = true; runSidecarPod(t, f) })
	t.Run("sidecar-stops-while-reading", func(t *testing.T) { stopSidecarWhileReading(t, f, 10) })
	t.Run("model-baked-in", func(t *testing.T) { runWarmWithBakedModel(t, f) })
	for _, file := range files {
		if !ran[filepath.Base(file)] {
			t.Errorf("docs/kubernetes/%s is not run in a container runtime by any test", filepath.Base(file))
		}
	}
}

// runWarmJob runs the warm Job's pod template as two indexes at once
// (its N changed from 8 to 2, in --shard and completions alike).
func runWarmJob(t *testing.T, f *clusterFixture) {
	spec, obj := manifestPodSpec(t, "warm-job.yaml")
	job := obj.(*batchv1.Job)
	n := int(deref(job.Spec.Completions))
	shard := fmt.Sprintf("--shard=$(JOB_COMPLETION_INDEX)/%d", n)
	if !slices.Contains(spec.Containers[0].Args, shard) {
		t.Fatalf("warm-job.yaml: no %s among the args %v (--shard's N must equal completions)", shard, spec.Containers[0].Args)
	}
	const parts = 2
	pods := make([]*kubePod, parts)
	for i := range parts {
		env := f.env
		env.env = map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(i)}
		base := env.args
		env.args = func(a string) string {
			return strings.Replace(base(a), fmt.Sprintf("/%d", n), fmt.Sprintf("/%d", parts), 1)
		}
		pods[i] = f.p.startPod(t, fmt.Sprintf("warm-%d", i), spec, env)
	}
	total := 0
	for i, k := range pods {
		c := spec.Containers[0].Name
		if code := k.wait(t, c, 10*time.Minute); code != 0 {
			t.Fatalf("warm index %d exited %d, want 0:\n%s", i, code, k.logs(c))
		}
		logs := k.logs(c)
		var ext, found int
		for line := range strings.SplitSeq(logs, "\n") {
			if j := strings.Index(line, " extracted, "); j >= 0 {
				fmt.Sscanf(line[strings.LastIndex(line[:j], " ")+1:], "%d", &ext)
				fmt.Sscanf(line[j+len(" extracted, "):], "%d found", &found)
			}
		}
		if !strings.Contains(logs, fmt.Sprintf("shard %d/%d", i, parts)) && !strings.Contains(logs, fmt.Sprintf("%d/%d", i, parts)) {
			t.Errorf("warm index %d's output names no part %d/%d:\n%s", i, i, parts, logs)
		}
		if ext == 0 {
			t.Errorf("warm index %d extracted nothing (its summary):\n%s", i, logs)
		}
		if strings.Contains(logs, "chmod 700") {
			t.Errorf("warm index %d asks for chmod 700 of its emptyDir cache, which a pod cannot act on:\n%s", i, logs)
		}
		total += ext + found
		if u := strings.TrimSpace(f.p.run(time.Minute, "inspect", "--format", "{{.Config.User}}", k.ctrName(c))); !slices.Contains([]string{"featurefs", "65532", "65532:65532"}, u) {
			t.Errorf("warm index %d ran as %q, want the image's user (featurefs)", i, u)
		}
	}
	keys := f.storeKeys(t)
	if len(keys) != len(f.want) || total != len(f.want) {
		t.Fatalf("the feature store holds %d features and the two parts counted %d, want %d each (disjoint, covering):\n%v", len(keys), total, len(f.want), keys)
	}
	for _, key := range keys {
		b, _ := storeFeature(t, f.minio, "features", key)
		rel := key[strings.Index(key, "/layer12/")+len("/layer12/"):]
		if want, ok := f.want[rel]; !ok || !bytes.Equal(npyData(t, b), npyData(t, want)) {
			t.Errorf("feature store %s: not the host binary's feature of %s", key, rel)
		}
	}
}

// npyData is the data section of a .npy file.
func npyData(t testing.TB, b []byte) []byte {
	t.Helper()
	f, err := parseNPY(b)
	if err != nil {
		t.Fatal(err)
	}
	return f.Raw
}

// runServeDaemonSet runs the DaemonSet's pod: ready by its own probe, it
// serves a --remote mount on the host the host binary's features; on
// SIGTERM it exits 0 within the grace period.
func runServeDaemonSet(t *testing.T, f *clusterFixture) {
	spec, _ := manifestPodSpec(t, "serve-daemonset.yaml")
	_, ps, _ := strings.Cut(freePort(t), ":")
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	env := f.env
	base := env.args
	env.args = func(a string) string {
		return strings.Replace(base(a), "--listen=0.0.0.0:7070", "--listen=127.0.0.1:"+strconv.Itoa(port), 1)
	}
	for i := range spec.Containers {
		for j := range spec.Containers[i].Ports {
			spec.Containers[i].Ports[j].HostPort = int32(port)
		}
	}
	k := f.p.startPod(t, "serve", spec, env)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := testMount(t, mountConfig{NoModel: true, Args: []string{"--remote", "http://127.0.0.1:" + strconv.Itoa(port),
		"--remote-token-file", tokenFile}})
	n := 0
	for rel, want := range f.want {
		b, err := os.ReadFile(filepath.Join(mnt.Path("features", "resnet50", "layer12"), rel))
		if err != nil {
			t.Fatalf("read %s through the served mount: %v\nserve's log:\n%s", rel, err, k.logs(spec.Containers[0].Name))
		}
		if !bytes.Equal(npyData(t, b), npyData(t, want)) {
			t.Errorf("%s through serve differs from the host binary's feature", rel)
		}
		if n++; n == 3 {
			break
		}
	}
	mnt.Unmount(t)
	codes, took := k.stop(t)
	grace := k.grace()
	for c, code := range codes {
		if code != 0 || took[c] > grace {
			t.Errorf("serve container %s: exit %d after %v on SIGTERM, want 0 within the grace period %v:\n%s", c, code, took[c], grace, k.logs(c))
		}
	}
}

// runSidecarPod runs the training pod: the sidecar mounts the feature
// store on the shared volume, the trainer (unprivileged, the trainer
// stand-in) reads every feature through it, equal to the host binary's;
// the pod's stop leaves no mount and the sidecar exits 0.
func runSidecarPod(t *testing.T, f *clusterFixture) {
	spec, _ := manifestPodSpec(t, "training-pod-sidecar.yaml")
	env := f.env
	var dir string
	env.container = func(c *corev1.Container) {
		if c.Image != "trainer:latest" {
			return
		}
		// The trainer's own image reads the directory its command names.
		line := append(slices.Clone(c.Command), c.Args...)
		dir = line[len(line)-1]
		c.Command, c.Args = nil, []string{dir}
	}
	k := f.p.startPod(t, "train", spec, env)
	train := spec.Containers[0].Name
	if code := k.wait(t, train, 5*time.Minute); code != 0 {
		t.Fatalf("the trainer exited %d:\n%s\nsidecar:\n%s", code, k.logs(train), k.logs(spec.InitContainers[0].Name))
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(k.logs(train), "\n") {
		if f := strings.Fields(line); len(f) == 3 && strings.HasSuffix(f[0], ".npy") {
			got[f[0]] = f[2]
		}
	}
	split := filepath.Base(dir) // the trainer reads one split (train/)
	n := 0
	for rel, want := range f.want {
		if !strings.HasPrefix(rel, split+"/") {
			continue
		}
		n++
		if got[strings.TrimPrefix(rel, split+"/")] != sha256hex(want) {
			t.Errorf("the trainer read %s as %q, want the host binary's feature", rel, got[strings.TrimPrefix(rel, split+"/")])
		}
	}
	if n == 0 || len(got) != n {
		t.Errorf("the trainer read %d files, want %d:\n%s", len(got), n, k.logs(train))
	}
	vol := k.vols["mnt"]
	if len(fuseMountsUnder(t, vol)) == 0 {
		t.Errorf("the sidecar's mount did not reach the node's volume %s (Bidirectional propagation)", vol)
	}
	codes, took := k.stop(t)
	side := spec.InitContainers[0].Name
	grace := k.grace()
	if codes[side] != 0 || took[side] > grace {
		t.Errorf("the sidecar exited %d after %v on SIGTERM, want 0 within %v:\n%s", codes[side], took[side], grace, k.logs(side))
	}
	if left := fuseMountsUnder(t, vol); len(left) > 0 {
		t.Errorf("the sidecar left mounts behind on the node: %v", left)
	}
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// stopSidecarWhileReading starts the training pod n times with the
// trainer reading the tree in a loop and stops the sidecar under it
// (SIGTERM, as when the pod is deleted with all its containers at once or
// the sidecar alone is restarted): each time the mount must exit 0 within
// the grace period and leave no mount on the node.
func stopSidecarWhileReading(t *testing.T, f *clusterFixture, n int) {
	spec, _ := manifestPodSpec(t, "training-pod-sidecar.yaml")
	env := f.env
	env.container = func(c *corev1.Container) {
		if c.Image == "trainer:latest" {
			line := append(slices.Clone(c.Command), c.Args...)
			c.Command, c.Args = nil, []string{"-loop", line[len(line)-1]}
		}
	}
	side, train := spec.InitContainers[0].Name, spec.Containers[0].Name
	var worst time.Duration
	for i := range n {
		k := f.p.startPod(t, fmt.Sprintf("stop-%d", i), spec, env)
		time.Sleep(500 * time.Millisecond) // the trainer is reading
		if st := k.state(train); st != "running" {
			t.Fatalf("round %d: the looping trainer is %s before the stop:\n%s", i, st, k.logs(train))
		}
		vol := k.vols["mnt"]
		code, took := k.stopOne(t, side)
		worst = max(worst, took)
		if code != 0 || took > k.grace() {
			t.Errorf("round %d: the sidecar exited %d after %v with a reader active, want 0 within %v:\n%s", i, code, took, k.grace(), k.logs(side))
		}
		if left := fuseMountsUnder(t, vol); len(left) > 0 {
			t.Errorf("round %d: the sidecar's stop left mounts on the node: %v", i, left)
		}
		k.stopOne(t, train)
		k.cleanup()
	}
	t.Logf("%d stops of the sidecar with a reader active: the longest took %v (grace period %v)", n, worst, spec.TerminationGracePeriodSeconds)
}

// TestNonRootMountInPodman: a mount by the image's own user (65532), with
// SYS_ADMIN in the bounding set only (as a Kubernetes runtime gives it:
// test/nocaps), which mounts and unmounts through the setuid fusermount3,
// on a volume shared with the node: it mounts, serves the node, and on
// SIGTERM unmounts and exits 0 leaving no mount behind and no
// "failed to open /etc/mtab" (reported at 06087ba, whose image had no
// /etc/mtab; Debian's fusermount3 3.14 here unmounts without one, so this
// test passes with or without it: the image has it all the same).
func TestNonRootMountInPodman(t *testing.T) {
	p := newPodman(t)
	p.loadImages(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	writeJPEG(t, filepath.Join(src, "train", "cat", "a.jpg"), 64, 48, 1)
	if err := os.Chmod(filepath.Join(work), 0o755); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			mode := os.FileMode(0o644)
			if d.IsDir() {
				mode = 0o755
			}
			os.Chmod(p, mode)
		}
		return err
	})
	models := filepath.Join(work, "models")
	mkdirMode(t, models, 0o755)
	if b, err := os.ReadFile(testenv.OddModel(t, "tiny")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(models, "tiny.onnx"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	bidi := corev1.MountPropagationBidirectional
	fuse := corev1.ResourceList{"smarter-devices/fuse": resource.MustParse("1")}
	spec := corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			{Name: "models", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "models"}}},
		},
		Containers: []corev1.Container{{
			Name: "featurefs", Image: "featurefs:latest", Command: []string{"/tools/nocaps", "featurefs"},
			Args: []string{"mount", "--foreground", "--allow-other", "--model=tiny=/models/tiny.onnx", "--cache-dir=/var/cache/featurefs", "/data", "/mnt/features"},
			// SYS_ADMIN added reaches the bounding set only, as a
			// Kubernetes runtime gives it to a non-root user (test/nocaps
			// makes podman do the same): the image's user mounts and
			// unmounts through the setuid fusermount3.
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
			Resources:       corev1.ResourceRequirements{Limits: fuse},
			StartupProbe:    &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"featurefs", "stats", "/mnt/features"}}}, PeriodSeconds: 1, FailureThreshold: 60},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "mnt", MountPath: "/mnt/features", MountPropagation: &bidi},
				{Name: "cache", MountPath: "/var/cache/featurefs"},
				{Name: "data", MountPath: "/data", ReadOnly: true},
				{Name: "models", MountPath: "/models", ReadOnly: true},
				{Name: "tools", MountPath: "/tools", ReadOnly: true},
			},
		}},
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "tools", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "tools"}}})
	tools := filepath.Join(work, "tools")
	mkdirMode(t, tools, 0o755)
	build := exec.Command(testenv.GoTool(t), "build", "-trimpath", "-o", filepath.Join(tools, "nocaps"), "./test/nocaps")
	build.Dir = testenv.RepoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building test/nocaps: %v\n%s", err, b)
	}
	k := p.startPod(t, "nonroot", spec, podEnv{claims: map[string]string{"data": src, "models": models, "tools": tools}})
	if u := strings.TrimSpace(p.run(time.Minute, "inspect", "--format", "{{.Config.User}}", k.ctrName("featurefs"))); !slices.Contains([]string{"featurefs", "65532", "65532:65532"}, u) {
		t.Fatalf("the mount runs as %q, want the image's user", u)
	}
	vol := k.vols["mnt"]
	if _, err := os.ReadFile(filepath.Join(vol, "features", "tiny", "layer0", "train", "cat", "a.npy")); err != nil {
		t.Fatalf("a feature through the non-root mount, read on the node: %v\n%s", err, k.logs("featurefs"))
	}
	code, took := k.stopOne(t, "featurefs")
	logs := k.logs("featurefs")
	if code != 0 || took > k.grace() {
		t.Errorf("the non-root mount exited %d after %v on SIGTERM, want 0 within %v:\n%s", code, took, k.grace(), logs)
	}
	if strings.Contains(logs, "mtab") || strings.Contains(logs, "unmount failed") {
		t.Errorf("the non-root mount could not unmount cleanly:\n%s", logs)
	}
	if left := fuseMountsUnder(t, vol); len(left) > 0 {
		t.Errorf("the non-root mount left mounts on the node after it exited: %v", left)
	}
}

// runWarmWithBakedModel builds docs/KUBERNETES.md's recipe for a model in
// the image (FROM featurefs:latest, COPY resnet50.onnx /models/) and runs
// the warm Job's pod template on it with its models volume dropped: it
// finds the model and every feature the Job stored (one part of one).
func runWarmWithBakedModel(t *testing.T, f *clusterFixture) {
	ctx := t.TempDir()
	model, err := os.ReadFile(filepath.Join(f.env.claims["featurefs-models"], "resnet50.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "resnet50.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte("FROM featurefs:latest\nCOPY resnet50.onnx /models/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.p.run(5*time.Minute, "build", "-q", "-t", "featurefs-resnet50:latest", ctx)
	spec, obj := manifestPodSpec(t, "warm-job.yaml")
	n := int(deref(obj.(*batchv1.Job).Spec.Completions))
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "models" })
	c := &spec.Containers[0]
	c.Image = "featurefs-resnet50:latest"
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "models" })
	env := f.env
	env.env = map[string]string{"JOB_COMPLETION_INDEX": "0"}
	base := env.args
	env.args = func(a string) string { return strings.Replace(base(a), fmt.Sprintf("/%d", n), "/1", 1) }
	k := f.p.startPod(t, "warm-baked", spec, env)
	if code := k.wait(t, c.Name, 5*time.Minute); code != 0 {
		t.Fatalf("warm on the image with the model baked in exited %d:\n%s", code, k.logs(c.Name))
	}
	if want := fmt.Sprintf("0 extracted, %d found", len(f.want)); !strings.Contains(k.logs(c.Name), want) {
		t.Errorf("warm on the image with the model baked in: no %q in its summary:\n%s", want, k.logs(c.Name))
	}
}
