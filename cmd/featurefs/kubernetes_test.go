package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/featurefs/featurefs/extractor/spec"
	"github.com/featurefs/featurefs/mountopts"
)

// The Kubernetes manifests of docs/kubernetes (issue 27, item 4), decoded
// strictly against the Kubernetes API types (k8s.io/api; a test-only
// dependency: the binary does not link it): an unknown or misspelt field,
// a duplicate key or a value of the wrong type fails. Then what makes
// each work is checked: every featurefs command line's flags are that
// command's (featurefs CMD -h) and parse; the Indexed Job gives each index
// its own part; the training pods have the FUSE device, SYS_ADMIN and, for
// the sidecar, mount propagation.

const k8sDir = "../../docs/kubernetes"

// k8sDocs decodes every document of the manifest file name strictly, by
// its apiVersion and kind.
func k8sDocs(t *testing.T, name string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		obj, err := decodeK8s([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		out = append(out, obj)
	}
	return out
}

// decodeK8s decodes one manifest document strictly into its API type.
func decodeK8s(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "batch/v1 Job":
		obj = &batchv1.Job{}
	case "v1 Pod":
		obj = &corev1.Pod{}
	default:
		return nil, &k8sKindError{tm.APIVersion, tm.Kind}
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

type k8sKindError struct{ apiVersion, kind string }

func (e *k8sKindError) Error() string {
	return "apiVersion " + e.apiVersion + " kind " + e.kind + ": not one this test decodes (apps/v1 DaemonSet, batch/v1 Job, v1 Pod)"
}

// one returns the only document of name, of type T.
func one[T any](t *testing.T, name string) *T {
	t.Helper()
	docs := k8sDocs(t, name)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", name, len(docs))
	}
	v, ok := docs[0].(*T)
	if !ok {
		t.Fatalf("%s: a %T, want a %T", name, docs[0], v)
	}
	return v
}

// featurefsLine is the featurefs command line a container runs: its
// command and args, or the featurefs line of a sh -c script; nil if it
// runs none.
func featurefsLine(t *testing.T, c corev1.Container) []string {
	t.Helper()
	line := append(slices.Clone(c.Command), c.Args...)
	if len(line) >= 3 && line[0] == "sh" && line[1] == "-c" {
		for _, l := range strings.Split(line[2], "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "featurefs" {
				return slices.DeleteFunc(f, func(s string) bool { return s == "&&" || s == "&" })
			}
		}
		return nil
	}
	if len(line) == 0 || line[0] != "featurefs" {
		return nil
	}
	return line
}

// parseLine parses a featurefs command line with that command's flag set,
// as featurefs does (flags anywhere), refusing a flag -h does not list.
func parseLine(t *testing.T, where string, line []string) (cmd string, o mountopts.Options, w warmArgs, pos []string) {
	t.Helper()
	if len(line) < 2 {
		t.Fatalf("%s: %q: no featurefs command", where, line)
	}
	cmd = line[1]
	var fl *flag.FlagSet
	switch cmd {
	case "warm":
		o = mountopts.Default()
		fl = warmFlags(&o, &w)
	case "serve":
		o = defaultServe()
		fl = serveFlags(&o)
	case "mount":
		o = mountopts.Default()
		fl = mountFlags(&o)
	default:
		t.Fatalf("%s: featurefs %s: not a command the manifests should run", where, cmd)
	}
	fl.SetOutput(new(strings.Builder))
	pos, err := parseInterspersed(fl, line[2:])
	if err != nil {
		t.Fatalf("%s: featurefs %s %s: %v (featurefs %s -h lists the flags)", where, cmd, strings.Join(line[2:], " "), err, cmd)
	}
	fl.Visit(func(f *flag.Flag) {
		if cmd == "warm" && mountOnly(f.Name) {
			t.Errorf("%s: featurefs warm --%s: a flag of mount only, which warm refuses", where, f.Name)
		}
	})
	return cmd, o, w, pos
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serve-daemonset.yaml", "training-pod-sidecar.yaml", "warm-job.yaml"}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
		k8sDocs(t, filepath.Base(f))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/kubernetes holds %v, want %v (each checked below)", got, want)
	}

	// Strictness can fail: a misspelt field, a field in the wrong
	// place, a wrong type.
	b, err := os.ReadFile(filepath.Join(k8sDir, "warm-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for old, bad := range map[string]string{
		"completionMode: Indexed": "completionMod: Indexed",
		"restartPolicy: Never":    "restartPolicy: Never\n      restartPolcy: Never",
		"completions: 8":          "completions: eight",
	} {
		if !strings.Contains(string(b), old) {
			t.Fatalf("warm-job.yaml lacks %q", old)
		}
		if _, err := decodeK8s([]byte(strings.Replace(string(b), old, bad, 1))); err == nil {
			t.Errorf("warm-job.yaml with %q decoded without an error", bad)
		}
	}
}

// The Indexed Job: completionMode Indexed; warm --shard
// $(JOB_COMPLETION_INDEX)/N with N = completions, so that index K (as
// Kubernetes expands it) is part K/N of N; --source and a shared
// --feature-store; restartPolicy Never (what backoffLimitPerIndex and
// podFailurePolicy need), its exit-code rule naming the warm container.
func TestKubernetesWarmJob(t *testing.T) {
	job := one[batchv1.Job](t, "warm-job.yaml")
	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completionMode %q, want Indexed", deref(s.CompletionMode))
	}
	if s.Completions == nil || *s.Completions < 2 || s.Parallelism == nil || *s.Parallelism < 1 {
		t.Fatalf("completions %v, parallelism %v: want N >= 2 parts, some at once", s.Completions, s.Parallelism)
	}
	if s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never", s.Template.Spec.RestartPolicy)
	}
	cs := s.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	if p := s.PodFailurePolicy; p != nil {
		for _, r := range p.Rules {
			if r.OnExitCodes != nil && (r.OnExitCodes.ContainerName == nil || *r.OnExitCodes.ContainerName != cs[0].Name) {
				t.Errorf("podFailurePolicy exit-code rule names container %q, want %q", deref(r.OnExitCodes.ContainerName), cs[0].Name)
			}
		}
	}
	line := featurefsLine(t, cs[0])
	cmd, o, w, pos := parseLine(t, "warm-job.yaml", line)
	if cmd != "warm" || w.source == "" || w.layer == "" || o.FeatureStore == "" || len(pos) > 1 {
		t.Errorf("featurefs %s: want warm --source --layer --feature-store [PREFIX], got %q", cmd, line)
	}
	if want := "$(JOB_COMPLETION_INDEX)/" + strconv.Itoa(int(*s.Completions)); o.Shard != want {
		t.Fatalf("--shard %q, want %q (Kubernetes expands $(VAR) in args; N = completions)", o.Shard, want)
	}
	seen := map[int]bool{}
	for k := range int(*s.Completions) {
		expanded := strings.ReplaceAll(o.Shard, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(k))
		sh, err := spec.ParseShard(expanded)
		if err != nil || sh.Index != k || sh.Count != int(*s.Completions) || seen[sh.Index] {
			t.Errorf("index %d: --shard %s = %v, %v; want part %d of %d", k, expanded, sh, err, k, *s.Completions)
		}
		seen[sh.Index] = true
	}
	for _, e := range cs[0].Env {
		if e.Name == "JOB_COMPLETION_INDEX" {
			t.Errorf("the container sets JOB_COMPLETION_INDEX itself: the Job controller sets it")
		}
	}
	checkImage(t, "warm-job.yaml", cs[0])
}

// The DaemonSet: featurefs serve on the labelled storage nodes, listening
// on all addresses at the port it exposes on the node, with its token
// file from a mounted Secret and a readiness probe on /healthz.
func TestKubernetesServeDaemonSet(t *testing.T) {
	ds := one[appsv1.DaemonSet](t, "serve-daemonset.yaml")
	pod := ds.Spec.Template
	if len(pod.Spec.NodeSelector) == 0 {
		t.Error("no nodeSelector: the servers belong on the storage nodes")
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not select the template (labels %v)", k, v, pod.Labels)
		}
	}
	cs := pod.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	c := cs[0]
	line := featurefsLine(t, c)
	cmd, o, _, pos := parseLine(t, "serve-daemonset.yaml", line)
	if cmd != "serve" || len(pos) != 1 {
		t.Fatalf("featurefs %s %v: want serve SOURCE", cmd, pos)
	}
	host, port, _ := strings.Cut(o.Serve.Listen, ":")
	if host != "0.0.0.0" || len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port || c.Ports[0].HostPort != c.Ports[0].ContainerPort {
		t.Errorf("--listen %s, ports %+v: want 0.0.0.0:PORT, exposed on the node at PORT", o.Serve.Listen, c.Ports)
	}
	if o.Serve.TokenFile == "" || o.Serve.NoAuth {
		t.Errorf("--token-file %q, --no-auth %v: the servers must ask for a token", o.Serve.TokenFile, o.Serve.NoAuth)
	}
	if !mountedFrom(pod.Spec, c, o.Serve.TokenFile, func(v corev1.Volume) bool { return v.Secret != nil }) {
		t.Errorf("--token-file %s is not in a Secret volume the container mounts", o.Serve.TokenFile)
	}
	if !mountedFrom(pod.Spec, c, o.CacheDir, func(v corev1.Volume) bool { return v.HostPath != nil }) {
		t.Errorf("--cache-dir %s is not on the node (a hostPath volume)", o.CacheDir)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("readinessProbe %+v: want GET /healthz (serve's unauthenticated health check)", p)
	}
	checkImage(t, "serve-daemonset.yaml", c)
}

// The training pod with featurefs in a sidecar: a native sidecar (an init
// container with restartPolicy Always, ready once featurefs stats answers
// on the mount), privileged (Bidirectional propagation needs it; it also
// gives /dev/fuse) with SYS_ADMIN, mounting on a shared volume with
// Bidirectional propagation, which the trainer mounts with
// HostToContainer.
func TestKubernetesTrainingPodSidecar(t *testing.T) {
	pod := one[corev1.Pod](t, "training-pod-sidecar.yaml")
	if len(pod.Spec.InitContainers) != 1 || len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want the featurefs sidecar and the trainer", len(pod.Spec.InitContainers), len(pod.Spec.Containers))
	}
	side, train := pod.Spec.InitContainers[0], pod.Spec.Containers[0]
	if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the featurefs init container is not a native sidecar (restartPolicy: Always)")
	}
	cmd, o, _, pos := parseLine(t, "training-pod-sidecar.yaml", featurefsLine(t, side))
	if cmd != "mount" || len(pos) != 2 || !o.Foreground {
		t.Fatalf("featurefs %s %v: want mount --foreground SOURCE MOUNTPOINT (a sidecar's process is the mount)", cmd, pos)
	}
	mnt := pos[1]
	sc := side.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") {
		t.Errorf("sidecar securityContext %+v: want privileged (for Bidirectional propagation and /dev/fuse) and SYS_ADMIN", sc)
	}
	if p := side.StartupProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"featurefs", "stats", mnt}) {
		t.Errorf("sidecar startupProbe %+v: want featurefs stats %s, so the trainer starts on a ready mount", p, mnt)
	}
	vol := ""
	for _, m := range side.VolumeMounts {
		if m.MountPath == mnt {
			vol = m.Name
			if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
				t.Errorf("sidecar mount of %s: propagation %q, want Bidirectional", mnt, deref(m.MountPropagation))
			}
		}
	}
	if vol == "" {
		t.Fatalf("the sidecar's mount point %s is not a volume", mnt)
	}
	shared := false
	for _, m := range train.VolumeMounts {
		if m.Name == vol {
			shared = true
			if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
				t.Errorf("trainer mount of %s: propagation %q, want HostToContainer", vol, deref(m.MountPropagation))
			}
			if !strings.Contains(strings.Join(append(train.Command, train.Args...), " "), m.MountPath+"/features/") {
				t.Errorf("the trainer does not read under %s", m.MountPath)
			}
		}
	}
	if !shared {
		t.Errorf("the trainer does not mount the sidecar's volume %s", vol)
	}
	checkImage(t, "training-pod-sidecar.yaml", side)
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// mountedFrom reports whether path is at or under a mount of c of a
// volume of pod that is(v) accepts.
func mountedFrom(pod corev1.PodSpec, c corev1.Container, path string, is func(corev1.Volume) bool) bool {
	for _, m := range c.VolumeMounts {
		if path != m.MountPath && !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && is(v) {
				return true
			}
		}
	}
	return false
}

// checkImage: a container running featurefs names an image, pulled as
// the pod's image policy says.
func checkImage(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	if c.Image == "" || strings.ContainsAny(c.Image, " \t") {
		t.Errorf("%s: container %s: image %q", where, c.Name, c.Image)
	}
}
