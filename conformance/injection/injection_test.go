// Package injection runs what bootstrap/inject makes of a pod as the kubelet
// would, in a pod of conformance/pods (a network namespace with its own cgroup),
// with the real binaries: weft-init's command as root, then weft-proxy's
// command line ($(VAR) expanded from its env, its volumes as files) as uid
// 1337 with its environment, against a real pilot; then the kubelet's probes
// from the node: /healthz/live, /healthz/ready and the application's rewritten
// probes on 15021.
package injection

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weft-mesh/weft/bootstrap/inject"
	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

func TestMain(m *testing.M) {
	if err := pods.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup))
}

// within bounds each wait: a process start, the first configuration.
const within = 30 * time.Second

// withEnv runs a Netns's commands with extra environment (the container's env).
type withEnv struct {
	proc.Netns
	env []string
}

func (w withEnv) Command(bin string, args ...string) *exec.Cmd {
	c := w.Netns.Command(bin, args...)
	c.Env = append(os.Environ(), w.env...)
	return c
}

// kubelet resolves a container's env the way the kubelet does for the
// fieldRefs injection uses, and expands $(VAR) in its args.
func kubelet(c corev1.Container, pod *pods.Pod, name, ns string, files map[string]string) (args, env []string) {
	vals := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = name
			case "metadata.namespace":
				v = ns
			case "status.podIP":
				v = pod.IP.String()
			}
		}
		vals[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	for _, a := range c.Args {
		for k, v := range vals {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		// The volumes' mount paths, where this test put their files.
		for from, to := range files {
			a = strings.ReplaceAll(a, from, to)
		}
		args = append(args, a)
	}
	return args, env
}

func TestInjectedPodRuns(t *testing.T) {
	pods.Require(t)
	node := pods.NewNode(t)
	sidecar := proc.Build(t, proc.Sidecar)
	pod := node.AddPod(t, "web", "shop")

	// The application: HTTP on :8080 in the pod, its readiness switchable.
	var ready atomic.Bool
	ready.Store(true)
	ln := pod.Listen(t, "tcp", ":8080")
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" && !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })

	pilot := proc.StartPilotIn(t, node, node.Gateway.String(), node.TempDir(t), proc.Secure())
	pilot.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 8080, targetPort: 8080, protocol: HTTP}]
`)

	// The pod as its manifest says it, injected as the webhook would.
	in := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{
			Name: "web", Image: "shop/web:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8080)}}},
		}}},
	}
	res, err := inject.Mutate(inject.Input{Object: in, NamespaceLabels: map[string]string{inject.NamespaceLabel: inject.NamespaceEnabled}},
		inject.Config{Mesh: inject.Mesh{PilotAddress: pilot.XDSTLSAddr()}})
	if err != nil || res.Skipped != "" {
		t.Fatalf("inject: %v %q", err, res.Skipped)
	}
	out := res.Object.(*corev1.Pod)
	initC, proxyC, app := out.Spec.InitContainers[0], out.Spec.InitContainers[1], out.Spec.Containers[0]

	// The kubelet's part. Volumes: the token Secret and the CA root ConfigMap
	// (weft-bootstrap), an emptyDir (weft-state), in a directory the proxy user owns.
	proxyUser := pod.As(pods.Proxy())
	dir := proxyUser.TempDir(t)
	files := map[string]string{inject.TokenFile: filepath.Join(dir, "token"), inject.CARootFile: filepath.Join(dir, "ca-root.pem"), inject.StateDir: filepath.Join(dir, "state")}
	if err := os.WriteFile(files[inject.TokenFile], []byte(proc.MintToken(t, pilot, "shop", "web", time.Hour)+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	root, err := os.ReadFile(pilot.CARootFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[inject.CARootFile], root, 0o444); err != nil {
		t.Fatal(err)
	}

	// weft-init, as root with its arguments.
	if initC.Command[0] != inject.Binary {
		t.Fatalf("init command %v", initC.Command)
	}
	initArgs, _ := kubelet(initC, pod, "web", "shop", files)
	if b, err := pod.Command(sidecar, initArgs...).CombinedOutput(); err != nil {
		t.Fatalf("weft-init (sidecar %s): %v\n%s", strings.Join(initArgs, " "), err, b)
	}
	// weft-proxy, as uid/gid 1337 (its securityContext) with its env.
	if sc := proxyC.SecurityContext; *sc.RunAsUser != pods.ProxyUID || *sc.RunAsGroup != pods.ProxyGID {
		t.Fatalf("proxy securityContext %+v", sc)
	}
	args, env := kubelet(proxyC, pod, "web", "shop", files)
	p := proc.StartIn(t, withEnv{proxyUser, env}, "weft-proxy", sidecar, args...)

	// The kubelet probes the pod's IP from the node.
	hc := node.HTTPClient(5 * time.Second)
	probe := func(path string) (int, error) {
		resp, err := hc.Get("http://" + pod.Addr(uint16(inject.HealthPort)) + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	waitCode := func(path string, want int) {
		t.Helper()
		testkit.Wait(t, within, func() error {
			select {
			case <-p.Exited():
				t.Fatalf("weft-proxy exited: %v\n%s", p.Err(), p.Logs.String())
			default:
			}
			if c, err := probe(path); err != nil || c != want {
				return fmt.Errorf("%s: %d %v, want %d", path, c, err, want)
			}
			return nil
		})
	}
	start := time.Now()
	waitCode(proxyC.LivenessProbe.HTTPGet.Path, http.StatusOK)
	t.Logf("live after %v", time.Since(start))
	waitCode(proxyC.ReadinessProbe.HTTPGet.Path, http.StatusOK) // enrolled, configured by pilot
	t.Logf("ready after %v", time.Since(start))
	// The application's probes, rewritten: through the sidecar to the app.
	waitCode(app.ReadinessProbe.HTTPGet.Path, http.StatusOK)
	waitCode(app.LivenessProbe.HTTPGet.Path, http.StatusOK)
	ready.Store(false)
	waitCode(app.ReadinessProbe.HTTPGet.Path, http.StatusServiceUnavailable)
	if c, err := probe(app.LivenessProbe.HTTPGet.Path); err != nil || c != http.StatusOK {
		t.Errorf("liveness while not ready: %d %v", c, err)
	}
	// --intercept=auto chose a mode and said why (uid 1337 without the eBPF
	// capabilities here: iptables, the rules weft-init installed).
	if logs := p.Logs.String(); !strings.Contains(logs, "interception mode chosen") || !strings.Contains(logs, "mode=iptables") {
		t.Errorf("weft-proxy did not log its interception mode:\n%s", logs)
	}
}
