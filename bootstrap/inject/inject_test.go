package inject

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/weft-mesh/weft/bootstrap/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files")

// decodeStrict decodes YAML or JSON into the typed object of its kind, unknown
// fields refused.
func decodeStrict(t *testing.T, data []byte) runtime.Object {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		t.Fatal(err)
	}
	obj := New(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
	if obj == nil {
		t.Fatalf("kind %s/%s not handled", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("strict decode: %v\n%s", err, data)
	}
	return obj
}

func readObject(t *testing.T, name string) ([]byte, runtime.Object) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return js, decodeStrict(t, data)
}

// applyPatch applies ops to doc with a JSONPatch library, as the API server does.
func applyPatch(t *testing.T, doc []byte, ops []Op) []byte {
	t.Helper()
	pj, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(pj)
	if err != nil {
		t.Fatalf("decode patch: %v\n%s", err, pj)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch: %v\n%s", err, pj)
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGolden injects each workload kind: the mutated object is the golden
// file; the patch applied to the input's JSON with a JSONPatch library, decoded
// strictly, is the same object; injecting the result again is a no-op.
func TestGolden(t *testing.T) {
	for _, name := range []string{"pod", "deployment", "statefulset", "daemonset", "job"} {
		t.Run(name, func(t *testing.T) {
			raw, obj := readObject(t, name+".yaml")
			res, err := Mutate(Input{Object: obj}, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped != "" || len(res.Patch) == 0 {
				t.Fatalf("not injected: %q", res.Skipped)
			}
			got, err := yaml.Marshal(res.Object)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), string(got)); d != "" {
				t.Errorf("mutated object differs from %s (-want +got; -update rewrites):\n%s", golden, d)
			}
			patched := applyPatch(t, raw, res.Patch)
			back := decodeStrict(t, patched)
			if d := cmp.Diff(mustJSON(t, res.Object), mustJSON(t, back)); d != "" {
				t.Errorf("patch applied to the input differs from the mutated object (-mutated +patched):\n%s", d)
			}
			again, err := Mutate(Input{Object: back}, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if again.Patch != nil || !strings.Contains(again.Skipped, "already injected") || mustJSON(t, again.Object) != mustJSON(t, back) {
				t.Errorf("second injection: skipped %q, patch %v: want a no-op", again.Skipped, again.Patch)
			}
			// The input object is not changed by Mutate.
			if d := cmp.Diff(mustJSON(t, decodeStrict(t, raw)), mustJSON(t, obj)); d != "" {
				t.Errorf("Mutate changed its input:\n%s", d)
			}
		})
	}
}

func pod(mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop", Labels: map[string]string{"app": "p"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func annotate(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func TestSkipped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       Input
		cfg      Config
		want     string
		injected bool
	}{
		{"plain pod, namespace unknown", Input{Object: pod(nil)}, Config{}, "", true},
		{"inject true", Input{Object: pod(annotate(InjectAnnotation, "true"))}, Config{}, "", true},
		{"opted out", Input{Object: pod(annotate(InjectAnnotation, "false"))}, Config{}, "opted out", false},
		{"already injected", Input{Object: pod(annotate(StatusAnnotation, "{}"))}, Config{}, "already injected", false},
		{"namespace labelled", Input{Object: pod(nil), NamespaceLabels: map[string]string{NamespaceLabel: NamespaceEnabled}}, Config{}, "", true},
		{"namespace not labelled", Input{Object: pod(nil), NamespaceLabels: map[string]string{}}, Config{}, "not labelled weft-injection=enabled", false},
		{"namespace disabled", Input{Object: pod(nil), NamespaceLabels: map[string]string{NamespaceLabel: "disabled"}}, Config{}, "not labelled", false},
		{"kube-system", Input{Object: pod(nil), Namespace: "kube-system"}, Config{}, "namespace kube-system is never injected", false},
		{"pilot's namespace", Input{Object: pod(func(p *corev1.Pod) { p.Namespace = "weft-system" })}, Config{}, "never injected", false},
		{"other system namespace", Input{Object: pod(nil)}, Config{Mesh: Mesh{SystemNamespace: "shop"}}, "never injected", false},
		{"hostNetwork", Input{Object: pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true })}, Config{}, "hostNetwork", false},
		{"request namespace wins", Input{Object: pod(nil), Namespace: "kube-public"}, Config{}, "never injected", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Mutate(tc.in, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tc.injected != (res.Patch != nil) || !strings.Contains(res.Skipped, tc.want) || (tc.injected && res.Skipped != "") {
				t.Fatalf("skipped %q, patch %d ops: want injected=%v, reason containing %q", res.Skipped, len(res.Patch), tc.injected, tc.want)
			}
			if !tc.injected && res.Object != tc.in.Object {
				t.Error("a skipped object is not returned as given")
			}
		})
	}
}

func TestErrors(t *testing.T) {
	ports := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprint(1000+i))
		}
		return strings.Join(p, ",")
	}
	cidrs := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprintf("10.%d.0.0/16", i))
		}
		return strings.Join(p, ",")
	}
	labels := func(n int) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Labels = map[string]string{}
			for i := range n {
				p.Labels[fmt.Sprint("l", i)] = "v"
			}
		}
	}
	httpProbe := func(port intstr.IntOrString, timeout int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{TimeoutSeconds: timeout,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/h", Port: port}}}
		}
	}
	for _, tc := range []struct {
		name string
		obj  *corev1.Pod
		cfg  Config
		want string // "" = no error
	}{
		{"bad inject annotation", pod(annotate(InjectAnnotation, "yes")), Config{}, `Pod/shop/p: metadata.annotations[sidecar.weft.dev/inject]: "yes", want "true" or "false"`},
		{"bad rewrite annotation", pod(annotate(RewriteProbesAnnotation, "0")), Config{}, `metadata.annotations[sidecar.weft.dev/rewriteAppHTTPProbers]: "0"`},
		{"reserved container", pod(func(p *corev1.Pod) { p.Spec.Containers[0].Name = ProxyName }), Config{}, `spec.containers[0].name: "weft-proxy" is reserved`},
		{"reserved init container", pod(func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: InitName}} }), Config{}, `spec.initContainers[0].name: "weft-init" is reserved`},
		{"reserved volume", pod(func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{{Name: StateVolume}} }), Config{}, `spec.volumes[0].name: "weft-state" is reserved`},
		{"reserved port", pod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 15001 }), Config{}, "spec.containers[0].ports[0].containerPort: 15001 is one of the sidecar's ports"},
		{"service account not a label", pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "a.b" }), Config{}, `spec.serviceAccountName: "a.b" is not a DNS-1123 label`},
		{"deprecated service account", pod(func(p *corev1.Pod) { p.Spec.DeprecatedServiceAccount = "Bad" }), Config{}, `spec.serviceAccountName: "Bad"`},
		{"named port missing", pod(httpProbe(intstr.FromString("metrics"), 0)), Config{}, `spec.containers[0].livenessProbe.httpGet.port: named port "metrics" is not one of container "app"'s ports`},
		{"named port found", pod(httpProbe(intstr.FromString("http"), 0)), Config{}, ""},
		{"probe on health port", pod(httpProbe(intstr.FromInt(15021), 0)), Config{}, "spec.containers[0].livenessProbe.httpGet.port: 15021 is the sidecar's health port"},
		{"probe timeout at bound", pod(httpProbe(intstr.FromInt(8080), probe.MaxTimeoutSeconds)), Config{}, ""},
		{"probe timeout past bound", pod(httpProbe(intstr.FromInt(8080), probe.MaxTimeoutSeconds+1)), Config{}, "spec.containers[0].livenessProbe.timeoutSeconds: 26 over the bound of 25"},
		{"ports at bound", pod(annotate(ExcludeInboundPortsAnnotation, ports(MaxAnnotationPorts))), Config{}, ""},
		{"ports past bound", pod(annotate(ExcludeOutboundPortsAnnotation, ports(MaxAnnotationPorts+1))), Config{}, "metadata.annotations[traffic.sidecar.weft.dev/excludeOutboundPorts]: 65 ports, limit 64"},
		{"bad port", pod(annotate(ExcludeInboundPortsAnnotation, "80,http")), Config{}, `excludeInboundPorts]: item 1 "http" is not a port in 1..65535`},
		{"port zero", pod(annotate(IncludeInboundPortsAnnotation, "0")), Config{}, `includeInboundPorts]: item 0 "0" is not a port`},
		{"cidrs at bound", pod(annotate(ExcludeOutboundIPRangesAnnotation, cidrs(MaxAnnotationCIDRs))), Config{}, ""},
		{"cidrs past bound", pod(annotate(ExcludeOutboundIPRangesAnnotation, cidrs(MaxAnnotationCIDRs+1))), Config{}, "65 ranges, limit 64"},
		{"bad cidr", pod(annotate(ExcludeOutboundIPRangesAnnotation, "10.0.0.0/33")), Config{}, `item 0 "10.0.0.0/33" is not a CIDR`},
		{"labels at bound", pod(labels(64)), Config{}, ""},
		{"labels past bound", pod(labels(65)), Config{}, "metadata.labels: 65 labels, the sidecar takes at most 64"},
		{"bad cpu", pod(nil), Config{Sidecar: Sidecar{CPU: "fast"}}, `MeshConfig spec.sidecar.cpu: "fast" is not a positive Kubernetes quantity`},
		{"zero cpu", pod(nil), Config{Sidecar: Sidecar{CPU: "0"}}, `spec.sidecar.cpu: "0"`},
		{"memory at bound", pod(nil), Config{Sidecar: Sidecar{Memory: fmt.Sprint(MinMemory)}}, ""},
		{"memory past bound", pod(nil), Config{Sidecar: Sidecar{Memory: fmt.Sprint(MinMemory - 1)}}, "MeshConfig spec.sidecar.memory: \"18874367\" is not a Kubernetes quantity of at least 18874368 bytes"},
		{"bad image", pod(nil), Config{Sidecar: Sidecar{Image: "a b"}}, `MeshConfig spec.sidecar.image: "a b"`},
		{"image at bound", pod(nil), Config{Sidecar: Sidecar{Image: strings.Repeat("a", MaxImageBytes)}}, ""},
		{"image past bound", pod(nil), Config{Sidecar: Sidecar{Image: strings.Repeat("a", MaxImageBytes+1)}}, "spec.sidecar.image"},
		{"bad pilot address", pod(nil), Config{Mesh: Mesh{PilotAddress: "pilot"}}, `pilot address: "pilot" is not HOST:PORT`},
		{"bad trust domain", pod(nil), Config{Mesh: Mesh{TrustDomain: "A_B"}}, `trust domain: "A_B"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Mutate(Input{Object: tc.obj}, tc.cfg)
			if tc.want == "" {
				if err != nil || res.Patch == nil {
					t.Fatalf("err %v, patch %v: want injected", err, res.Patch)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v: want %q", err, tc.want)
			}
			if res.Object != nil || res.Patch != nil {
				t.Error("an error returned a half result")
			}
		})
	}
}

// TestProbeRewrite checks the probers handed to the sidecar against the pod's
// original probes, and the sidecar's command line and environment.
func TestProbeRewrite(t *testing.T) {
	_, obj := readObject(t, "pod.yaml")
	res, err := Mutate(Input{Object: obj}, Config{Sidecar: Sidecar{Memory: "100Mi"}})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Object.(*corev1.Pod)
	proxy := p.Spec.InitContainers[1]
	env := map[string]string{}
	for _, e := range proxy.Env {
		env[e.Name] = e.Value
	}
	got, err := probe.Parse(env[probe.EnvName])
	if err != nil {
		t.Fatal(err)
	}
	want := probe.Probers{
		"/app-health/web/livez":  {HTTPGet: &probe.HTTPGet{Path: "/healthz", Port: 8080}, TimeoutSeconds: 3},
		"/app-health/web/readyz": {HTTPGet: &probe.HTTPGet{Path: "/ready?deep=1", Port: 9901, Scheme: "HTTPS", HTTPHeaders: []probe.Header{{Name: "X-Probe", Value: "kubelet"}}}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("probers (-want +got):\n%s", d)
	}
	web, cache := p.Spec.Containers[0], p.Spec.Containers[1]
	if g := web.LivenessProbe.HTTPGet; g.Path != "/app-health/web/livez" || g.Port.IntValue() != 15021 || g.Scheme != corev1.URISchemeHTTP || web.LivenessProbe.TimeoutSeconds != 3 {
		t.Errorf("web liveness: %+v", web.LivenessProbe)
	}
	if g := web.ReadinessProbe.HTTPGet; g.Path != "/app-health/web/readyz" || len(g.HTTPHeaders) != 0 {
		t.Errorf("web readiness: %+v", g)
	}
	if cache.LivenessProbe.TCPSocket == nil || cache.StartupProbe.HTTPGet.Host != "10.0.0.9" || cache.StartupProbe.HTTPGet.Path != "/" {
		t.Errorf("cache's tcpSocket and explicit-host probes must be left alone: %+v %+v", cache.LivenessProbe, cache.StartupProbe)
	}
	if env["GOMAXPROCS"] != "1" || env["GODEBUG"] != GODEBUG || env["GOMEMLIMIT"] != fmt.Sprint(int64(100<<20*MemoryFraction)) {
		t.Errorf("runtime env: %v", env)
	}
	wantArgs := []string{"--node-id=$(POD_NAME).$(POD_NAMESPACE)", "--namespace=$(POD_NAMESPACE)", "--service-account=web", "--labels=app=web,version=v1",
		"--address=$(POD_IP)", "--pilot=" + DefaultPilotAddress, "--token-file=" + TokenFile, "--ca-root=" + CARootFile,
		"--trust-domain=cluster.local", "--state-dir=" + StateDir, "--intercept=auto"}
	if d := cmp.Diff(wantArgs, proxy.Args); d != "" {
		t.Errorf("sidecar args (-want +got):\n%s", d)
	}
	wantInit := []string{"intercept", "-p", "15001", "-z", "15006", "-u", "1337", "-g", "1337", "-b", "*", "-d", "9901",
		"-x", "10.96.0.0/12,169.254.169.254/32", "--dns-port", "15053", "--mode", "iptables"}
	if d := cmp.Diff(wantInit, p.Spec.InitContainers[0].Args); d != "" {
		t.Errorf("init args (-want +got):\n%s", d)
	}
	if caps := p.Spec.InitContainers[0].SecurityContext.Capabilities; mustJSON(t, caps.Add) != `["NET_ADMIN","NET_RAW"]` || mustJSON(t, caps.Drop) != `["ALL"]` {
		t.Errorf("init capabilities: %+v", caps)
	}

	// With the rewrite turned off, the probes and the env stay as they were.
	obj.(*corev1.Pod).Annotations[RewriteProbesAnnotation] = "false"
	res, err = Mutate(Input{Object: obj}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p = res.Object.(*corev1.Pod)
	if p.Spec.Containers[0].LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("rewrite off: liveness rewritten")
	}
	for _, e := range p.Spec.InitContainers[1].Env {
		if e.Name == probe.EnvName {
			t.Error("rewrite off: probers env set")
		}
	}
}

// TestPatchShapes: a pod with no init containers, volumes or annotations gets
// whole arrays and maps added; one with them gets elements added, so fields of
// the input that this package does not know are never rewritten.
func TestPatchShapes(t *testing.T) {
	res, err := Mutate(Input{Object: pod(nil)}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, op := range res.Patch {
		paths = append(paths, op.Op+" "+op.Path)
	}
	want := []string{"add /spec/initContainers", "add /spec/volumes", "add /metadata/annotations"}
	if d := cmp.Diff(want, paths); d != "" {
		t.Errorf("patch (-want +got):\n%s", d)
	}
	// Unknown fields (a newer API's) survive the patch.
	raw := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop","labels":{"app":"p"},"futureMeta":1},` +
		`"spec":{"futureField":{"x":1},"containers":[{"name":"app","image":"app:1","futureContainerField":true,"ports":[{"name":"http","containerPort":8080}]}]}}`
	out := applyPatch(t, []byte(raw), res.Patch)
	for _, f := range []string{`"futureField":{"x":1}`, `"futureContainerField":true`, `"futureMeta":1`} {
		if !strings.Contains(string(out), f) {
			t.Errorf("patched pod lost %s:\n%s", f, out)
		}
	}
}
