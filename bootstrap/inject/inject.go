// Package inject is the sidecar injection as a pure function: a Pod (or the pod
// template of a Deployment, StatefulSet, DaemonSet or Job), the sidecar settings
// of MeshConfig and the mesh settings in, the mutated object and the JSONPatch
// that makes it out. The admission webhook (bootstrap/webhook) and `meshctl
// inject` both call Mutate, so the two give the same result by construction.
// No clock, no I/O, no goroutines.
//
// What an injected pod gets (issue #10, design "Injection"):
//   - init container weft-init, first: `sidecar intercept ...` installs the
//     interception rules (root, capabilities NET_ADMIN and NET_RAW only). The
//     sidecar picks its mode at start (--intercept=auto: eBPF when its self-test
//     passes, else iptables), so the init step always installs the full iptables
//     rule set (--mode iptables): it is the fallback, and connections the eBPF
//     programs already sent to 127.0.0.1:15001 are loopback, which the rules
//     leave alone.
//   - the sidecar weft-proxy, second, as a Kubernetes native sidecar (an init
//     container with restartPolicy: Always; Kubernetes >= 1.29). Deliberately not
//     a regular container as Istio's default is: it starts before the
//     application's init containers and containers (its startup probe holds them
//     until a configuration is active), so they have the mesh from their first
//     connection, and a Job completes when its containers do (a regular sidecar
//     container would keep the Job's pod running for ever).
//   - uid/gid 1337, the sidecar image's `sidecar` with --intercept=auto, the
//     resources of MeshConfig.spec.sidecar, GOMAXPROCS, GOMEMLIMIT and GODEBUG as
//     the benchmarks run it, readiness /healthz/ready, liveness /healthz/live and
//     startup /healthz/ready on 15021.
//   - the bootstrap token from a Secret, projected with the mesh CA root into one
//     read-only volume (see bootstrapVolume for why a Secret).
//   - the application's HTTP probes moved behind the sidecar as Istio's probe
//     rewrite does (/app-health/<container>/livez|readyz|startupz on 15021; the
//     originals in WEFT_KUBE_APP_PROBERS, bootstrap/probe).
//   - annotation sidecar.weft.dev/status: an object that has it is left as is.
package inject

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weft-mesh/weft/bootstrap/intercept"
	"github.com/weft-mesh/weft/bootstrap/probe"
	"github.com/weft-mesh/weft/bootstrap/render"
)

// Names injection adds.
const (
	InitName        = "weft-init"
	ProxyName       = "weft-proxy"
	BootstrapVolume = "weft-bootstrap"
	StateVolume     = "weft-state"
	// Binary is the command in the sidecar image (on its PATH).
	Binary = "sidecar"
	// BootstrapDir holds the token and the CA root in weft-proxy; StateDir is the
	// sidecar's --state-dir (last-known-good), an emptyDir.
	BootstrapDir = "/var/run/weft/bootstrap"
	TokenFile    = BootstrapDir + "/token"
	CARootFile   = BootstrapDir + "/ca-root.pem"
	StateDir     = "/var/lib/weft"
	// CARootKey and TokenKey are the keys read from the ConfigMap and the Secret.
	CARootKey = "root.pem"
	TokenKey  = "token"
)

// Annotations and the namespace label injection reads and writes.
const (
	// StatusAnnotation marks an injected pod (its value says what was added).
	StatusAnnotation = "sidecar.weft.dev/status"
	// InjectAnnotation "false" on a pod (template) opts it out; "true" is the default.
	InjectAnnotation = "sidecar.weft.dev/inject"
	// RewriteProbesAnnotation "false" leaves the application's probes alone.
	RewriteProbesAnnotation = "sidecar.weft.dev/rewriteAppHTTPProbers"
	// Interception settings, Istio's annotation names under our prefix; each
	// becomes a flag of `sidecar intercept`.
	IncludeInboundPortsAnnotation     = "traffic.sidecar.weft.dev/includeInboundPorts"     // -b, default "*"
	ExcludeInboundPortsAnnotation     = "traffic.sidecar.weft.dev/excludeInboundPorts"     // -d
	ExcludeOutboundPortsAnnotation    = "traffic.sidecar.weft.dev/excludeOutboundPorts"    // -o
	ExcludeOutboundIPRangesAnnotation = "traffic.sidecar.weft.dev/excludeOutboundIPRanges" // -x
	// NamespaceLabel=NamespaceEnabled selects a namespace (the webhook's
	// namespaceSelector in deploy/).
	NamespaceLabel   = "weft-injection"
	NamespaceEnabled = "enabled"
)

// The sidecar's identity and ports (DESIGN.md Ports): bootstrap/intercept's
// and bootstrap/render's defaults, so the rules, the sidecar and the pod agree.
const (
	ProxyUID     = intercept.DefaultProxyUID
	ProxyGID     = intercept.DefaultProxyGID
	OutboundPort = intercept.DefaultOutboundPort
	InboundPort  = intercept.DefaultInboundPort
	HealthPort   = render.DefaultReadyPort // 15021
	DNSPort      = intercept.DefaultDNSPort
)

// ReservedPorts are the sidecar's in the pod's network namespace: an
// application container may not declare them.
var ReservedPorts = []int32{15000, OutboundPort, InboundPort, HealthPort, DNSPort, 15090}

// NeverInjected namespaces (besides Mesh.SystemNamespace): Kubernetes' own.
var NeverInjected = []string{"kube-system", "kube-public", "kube-node-lease"}

// Bounds of the interception annotations.
const (
	MaxAnnotationPorts  = 64
	MaxAnnotationCIDRs  = 64
	StateVolumeBytes    = 64 << 20 // weft-state emptyDir sizeLimit: the last-known-good snapshot
	StartupProbeSeconds = 600      // the sidecar may take this long to activate a first configuration
)

// GODEBUG is the Go runtime setting the benchmarks run the sidecar with
// (tools/bench/proxy/run.sh SIDECAR_GODEBUG): with schedtrace set, sysmon never
// parks, so a syscall need not futex-wake it (~10% of the proxy's CPU at 2,000
// rps); the price is one SCHED line an hour on stderr.
const GODEBUG = "schedtrace=3600000"

// Kinds Mutate handles.
var (
	PodKind         = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	DeploymentKind  = appsv1.SchemeGroupVersion.WithKind("Deployment")
	StatefulSetKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	DaemonSetKind   = appsv1.SchemeGroupVersion.WithKind("DaemonSet")
	JobKind         = batchv1.SchemeGroupVersion.WithKind("Job")
)

// New returns an empty object of a kind Mutate handles, or nil.
func New(gvk schema.GroupVersionKind) runtime.Object {
	switch gvk {
	case PodKind:
		return &corev1.Pod{}
	case DeploymentKind:
		return &appsv1.Deployment{}
	case StatefulSetKind:
		return &appsv1.StatefulSet{}
	case DaemonSetKind:
		return &appsv1.DaemonSet{}
	case JobKind:
		return &batchv1.Job{}
	}
	return nil
}

// Op is one JSONPatch (RFC 6902) operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Result of Mutate.
type Result struct {
	// Object is the mutated copy; the input itself when not injected.
	Object runtime.Object
	// Patch turns the input's JSON into Object's; nil when not injected.
	Patch []Op
	// Skipped says why the object was not injected; "" when it was.
	Skipped string
}

// Input is what Mutate reads besides the settings.
type Input struct {
	Object runtime.Object // a Pod, Deployment, StatefulSet, DaemonSet or Job
	// Namespace of the object (the admission request's, which a Pod being
	// created may not have in its metadata); "" uses the object's, else "default".
	Namespace string
	// NamespaceLabels are the namespace's labels when known; nil means unknown
	// (the webhook: its namespaceSelector already chose the namespace).
	NamespaceLabels map[string]string
}

// template is the pod template of an object and where it is.
type template struct {
	meta  *metav1.ObjectMeta
	spec  *corev1.PodSpec
	path  string // JSON pointer of the template ("" for a Pod)
	field string // field path prefix for errors
}

func templateOf(obj runtime.Object) (template, bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return template{&o.ObjectMeta, &o.Spec, "", ""}, true
	case *appsv1.Deployment:
		return template{&o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, "/spec/template", "spec.template."}, true
	case *appsv1.StatefulSet:
		return template{&o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, "/spec/template", "spec.template."}, true
	case *appsv1.DaemonSet:
		return template{&o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, "/spec/template", "spec.template."}, true
	case *batchv1.Job:
		return template{&o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, "/spec/template", "spec.template."}, true
	}
	return template{}, false
}

// Mutate injects in.Object when it should be: not opted out, not already
// injected, its namespace selected. Errors name the object and the field; on
// an error nothing is returned (nothing half-applied).
func Mutate(in Input, cfg Config) (Result, error) {
	s, err := cfg.settings()
	if err != nil {
		return Result{}, err
	}
	obj := in.Object.DeepCopyObject()
	t, ok := templateOf(obj)
	if !ok {
		return Result{}, fmt.Errorf("inject: %T is not a Pod, Deployment, StatefulSet, DaemonSet or Job", in.Object)
	}
	top, _ := metaOf(obj)
	ns := in.Namespace
	if ns == "" {
		ns = top.Namespace
	}
	if ns == "" {
		ns = "default"
	}
	name := objectName(obj, top, ns)
	skip, err := decide(ns, in.NamespaceLabels, t, s)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	if skip != "" {
		return Result{Object: in.Object, Skipped: skip}, nil
	}
	m, err := plan(t, s)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	patch := m.patch(t)
	m.apply(t)
	return Result{Object: obj, Patch: patch}, nil
}

func metaOf(obj runtime.Object) (*metav1.ObjectMeta, bool) {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m, true
		}
	}
	return &metav1.ObjectMeta{}, false
}

// objectName is Kind/namespace/name for errors (generateName shows as name-*).
func objectName(obj runtime.Object, m *metav1.ObjectMeta, ns string) string {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	n := m.Name
	if n == "" && m.GenerateName != "" {
		n = m.GenerateName + "*"
	}
	return kind + "/" + ns + "/" + n
}

// decide says why t is not injected ("" when it is).
func decide(ns string, nsLabels map[string]string, t template, s *settings) (string, error) {
	if slices.Contains(NeverInjected, ns) || ns == s.Mesh.SystemNamespace {
		return "namespace " + ns + " is never injected", nil
	}
	if nsLabels != nil && nsLabels[NamespaceLabel] != NamespaceEnabled {
		return fmt.Sprintf("namespace %s is not labelled %s=%s", ns, NamespaceLabel, NamespaceEnabled), nil
	}
	if _, done := t.meta.Annotations[StatusAnnotation]; done {
		return "already injected (annotation " + StatusAnnotation + ")", nil
	}
	switch v, set := t.meta.Annotations[InjectAnnotation]; {
	case !set, v == "true":
	case v == "false":
		return "opted out (annotation " + InjectAnnotation + `: "false")`, nil
	default:
		return "", fmt.Errorf(`%smetadata.annotations[%s]: %q, want "true" or "false"`, t.field, InjectAnnotation, v)
	}
	if t.spec.HostNetwork {
		// Interception would rewrite the node's own network namespace.
		return "hostNetwork pod (interception would change the node's network)", nil
	}
	return "", nil
}

// mutation is what plan decided for one pod template.
type mutation struct {
	init, proxy corev1.Container
	volumes     []corev1.Volume
	probes      []probeRewrite
	status      string
}

type probeRewrite struct {
	container int
	field     string // livenessProbe | readinessProbe | startupProbe
	httpGet   corev1.HTTPGetAction
}

// Status is the value of StatusAnnotation.
type Status struct {
	InitContainers []string `json:"initContainers"`
	Volumes        []string `json:"volumes"`
	Image          string   `json:"image"`
}

func plan(t template, s *settings) (*mutation, error) {
	spec, f := t.spec, t.field
	if len(spec.Containers) == 0 {
		return nil, fmt.Errorf("%sspec.containers: empty (a pod has at least one container)", f)
	}
	for i, c := range spec.InitContainers {
		if c.Name == InitName || c.Name == ProxyName {
			return nil, fmt.Errorf("%sspec.initContainers[%d].name: %q is reserved for injection (and the pod has no %s annotation)", f, i, c.Name, StatusAnnotation)
		}
	}
	for i, c := range spec.Containers {
		if c.Name == InitName || c.Name == ProxyName {
			return nil, fmt.Errorf("%sspec.containers[%d].name: %q is reserved for injection (and the pod has no %s annotation)", f, i, c.Name, StatusAnnotation)
		}
		for j, p := range c.Ports {
			if slices.Contains(ReservedPorts, p.ContainerPort) {
				return nil, fmt.Errorf("%sspec.containers[%d].ports[%d].containerPort: %d is one of the sidecar's ports %v", f, i, j, p.ContainerPort, ReservedPorts)
			}
		}
	}
	for i, v := range spec.Volumes {
		if v.Name == BootstrapVolume || v.Name == StateVolume {
			return nil, fmt.Errorf("%sspec.volumes[%d].name: %q is reserved for injection", f, i, v.Name)
		}
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = spec.DeprecatedServiceAccount
	}
	if sa == "" {
		sa = "default"
	}
	if !dnsLabel(sa) {
		return nil, fmt.Errorf("%sspec.serviceAccountName: %q is not a DNS-1123 label, which the mesh identity (spiffe://<td>/ns/<ns>/sa/<sa>) needs", f, sa)
	}
	if !dnsSubdomain(s.Mesh.TokenSecretPrefix + sa) {
		return nil, fmt.Errorf("%sspec.serviceAccountName: %q: Secret name %q is not a DNS-1123 subdomain", f, sa, s.Mesh.TokenSecretPrefix+sa)
	}
	labels, err := labelsArg(t.meta.Labels, f)
	if err != nil {
		return nil, err
	}
	initArgs, err := interceptArgs(t.meta.Annotations, f)
	if err != nil {
		return nil, err
	}
	m := &mutation{}
	probers := probe.Probers{}
	switch v, set := t.meta.Annotations[RewriteProbesAnnotation]; {
	case !set, v == "true":
		if m.probes, err = rewriteProbes(spec.Containers, f, probers); err != nil {
			return nil, err
		}
	case v == "false":
	default:
		return nil, fmt.Errorf(`%smetadata.annotations[%s]: %q, want "true" or "false"`, f, RewriteProbesAnnotation, v)
	}
	env, err := proxyEnv(s, probers)
	if err != nil {
		return nil, fmt.Errorf("%sspec.containers: %w", f, err)
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: s.cpu, corev1.ResourceMemory: s.memory},
		// A memory limit, so the sidecar's ceiling (90% of it) acts before the
		// OOM killer. No CPU limit: throttling adds latency to every request, and
		// GOMAXPROCS=1 already bounds the sidecar to one core.
		Limits: corev1.ResourceList{corev1.ResourceMemory: s.memory},
	}
	m.init = corev1.Container{
		Name:      InitName,
		Image:     s.Sidecar.Image,
		Command:   []string{Binary},
		Args:      initArgs,
		Resources: res,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr(int64(0)), RunAsGroup: ptr(int64(0)), RunAsNonRoot: ptr(false),
			Privileged: ptr(false), AllowPrivilegeEscalation: ptr(false),
			// iptables-restore takes /run/xtables.lock.
			ReadOnlyRootFilesystem: ptr(false),
			Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	args := []string{
		"--node-id=$(POD_NAME).$(POD_NAMESPACE)",
		"--namespace=$(POD_NAMESPACE)",
		"--service-account=" + sa,
	}
	if labels != "" {
		args = append(args, "--labels="+labels)
	}
	args = append(args,
		"--address=$(POD_IP)",
		"--pilot="+s.Mesh.PilotAddress,
		"--token-file="+TokenFile,
		"--ca-root="+CARootFile,
		"--trust-domain="+s.Mesh.TrustDomain,
		"--state-dir="+StateDir,
		"--intercept=auto",
	)
	health := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(HealthPort), Scheme: corev1.URISchemeHTTP}}}
	}
	ready, live, startup := health("/healthz/ready"), health("/healthz/live"), health("/healthz/ready")
	ready.PeriodSeconds, ready.FailureThreshold, ready.TimeoutSeconds = 2, 3, 1
	live.PeriodSeconds, live.FailureThreshold, live.TimeoutSeconds = 10, 3, 1
	startup.PeriodSeconds, startup.FailureThreshold, startup.TimeoutSeconds = 1, StartupProbeSeconds, 1
	m.proxy = corev1.Container{
		Name:          ProxyName,
		Image:         s.Sidecar.Image,
		Command:       []string{Binary},
		Args:          args,
		Env:           env,
		Resources:     res,
		RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{
			{Name: BootstrapVolume, MountPath: BootstrapDir, ReadOnly: true},
			{Name: StateVolume, MountPath: StateDir},
		},
		ReadinessProbe: ready,
		LivenessProbe:  live,
		StartupProbe:   startup,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr(int64(ProxyUID)), RunAsGroup: ptr(int64(ProxyGID)), RunAsNonRoot: ptr(true),
			Privileged: ptr(false), AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			// eBPF mode's capabilities (design: CAP_BPF, CAP_NET_ADMIN,
			// CAP_PERFMON). Kubernetes grants added capabilities to a non-root
			// user only as bounding/permitted, not ambient: without file
			// capabilities on the image's binary the eBPF self-test fails and
			// --intercept=auto falls back to iptables, which needs none.
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"BPF", "NET_ADMIN", "PERFMON"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	m.volumes = []corev1.Volume{bootstrapVolume(s, sa), {
		Name:         StateVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(*resourceBytes(StateVolumeBytes))}},
	}}
	st, err := json.Marshal(Status{InitContainers: []string{InitName, ProxyName}, Volumes: []string{BootstrapVolume, StateVolume}, Image: s.Sidecar.Image})
	if err != nil {
		return nil, err
	}
	m.status = string(st)
	return m, nil
}

// bootstrapVolume is the token and the CA root, read-only, in one projected
// volume. The token comes from a Secret, not from a projected Kubernetes
// service-account token: pilot's CA authenticates a first CSR with its own
// Ed25519 bootstrap tokens (certs/token, `meshctl token create`), and checking a
// Kubernetes-issued token would need pilot to call the API server's TokenReview,
// which it has no client for. The Secret's token is reusable within its TTL (at
// most a week; a restarted sidecar enrolls again) and bounded to TokenCSRs CSRs a
// minute, so an operator rotates the Secret and sizes rollouts by it. Mode 0444:
// the files are root's and the sidecar runs as 1337, and only weft-proxy mounts
// the volume, so no other container sees the token.
func bootstrapVolume(s *settings, sa string) corev1.Volume {
	return corev1.Volume{Name: BootstrapVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o444)),
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: s.Mesh.TokenSecretPrefix + sa},
				Items: []corev1.KeyToPath{{Key: TokenKey, Path: "token"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: s.Mesh.CARootConfigMap},
				Items: []corev1.KeyToPath{{Key: CARootKey, Path: "ca-root.pem"}}}},
		},
	}}}
}

func proxyEnv(s *settings, probers probe.Probers) ([]corev1.EnvVar, error) {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
		// One worker thread, as the benchmarks measure the sidecar
		// (render.DefaultConcurrency explains why).
		{Name: "GOMAXPROCS", Value: strconv.Itoa(render.DefaultConcurrency)},
		{Name: "GOMEMLIMIT", Value: strconv.FormatInt(s.goMemLimit, 10)},
		{Name: "GODEBUG", Value: GODEBUG},
	}
	if len(probers) > 0 {
		js, err := probers.Encode()
		if err != nil {
			return nil, err
		}
		env = append(env, corev1.EnvVar{Name: probe.EnvName, Value: js})
	}
	return env, nil
}

// rewriteProbes moves each HTTP probe of the application's containers behind
// the sidecar, adding the originals to probers. A probe with an explicit host
// targets another machine and is left alone, as are exec, tcpSocket and gRPC
// probes.
func rewriteProbes(cs []corev1.Container, f string, probers probe.Probers) ([]probeRewrite, error) {
	var out []probeRewrite
	for i := range cs {
		c := &cs[i]
		for _, k := range []struct {
			field, kind string
			p           *corev1.Probe
		}{{"livenessProbe", probe.Liveness, c.LivenessProbe}, {"readinessProbe", probe.Readiness, c.ReadinessProbe}, {"startupProbe", probe.Startup, c.StartupProbe}} {
			if k.p == nil || k.p.HTTPGet == nil || k.p.HTTPGet.Host != "" {
				continue
			}
			at := fmt.Sprintf("%sspec.containers[%d].%s", f, i, k.field)
			g := k.p.HTTPGet
			port, err := resolvePort(g.Port, c)
			if err != nil {
				return nil, fmt.Errorf("%s.httpGet.port: %w", at, err)
			}
			if k.p.TimeoutSeconds > probe.MaxTimeoutSeconds {
				return nil, fmt.Errorf("%s.timeoutSeconds: %d over the bound of %d a probe through the sidecar has", at, k.p.TimeoutSeconds, probe.MaxTimeoutSeconds)
			}
			if !probe.ValidContainerName(c.Name) {
				return nil, fmt.Errorf("%sspec.containers[%d].name: %q is not a DNS-1123 label", f, i, c.Name)
			}
			pr := probe.Prober{HTTPGet: &probe.HTTPGet{Path: g.Path, Port: port, Scheme: string(g.Scheme)}, TimeoutSeconds: k.p.TimeoutSeconds}
			for _, h := range g.HTTPHeaders {
				pr.HTTPGet.HTTPHeaders = append(pr.HTTPGet.HTTPHeaders, probe.Header{Name: h.Name, Value: h.Value})
			}
			key := probe.Key(c.Name, k.kind)
			probers[key] = pr
			if err := probers.Validate(); err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			out = append(out, probeRewrite{container: i, field: k.field,
				httpGet: corev1.HTTPGetAction{Path: key, Port: intstr.FromInt32(HealthPort), Scheme: corev1.URISchemeHTTP}})
		}
	}
	return out, nil
}

// resolvePort turns a probe's port (number or the name of one of the
// container's ports) into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("%d outside 1..65535", p.IntVal)
		}
		if p.IntVal == HealthPort {
			return 0, fmt.Errorf("%d is the sidecar's health port", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return resolvePort(intstr.FromInt(n), c)
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return resolvePort(intstr.FromInt32(cp.ContainerPort), c)
		}
	}
	return 0, fmt.Errorf("named port %q is not one of container %q's ports", p.StrVal, c.Name)
}

// labelsArg is the sidecar's --labels value from the pod's labels (sorted).
func labelsArg(labels map[string]string, f string) (string, error) {
	if len(labels) > render.MaxLabels {
		return "", fmt.Errorf("%smetadata.labels: %d labels, the sidecar takes at most %d", f, len(labels), render.MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := labels[k]
		if k == "" || strings.ContainsAny(k, "=, \t\n$") || strings.ContainsAny(v, "=,\n$") || len(k) > render.MaxLabelBytes || len(v) > render.MaxLabelBytes {
			return "", fmt.Errorf("%smetadata.labels[%q]: not a Kubernetes label the sidecar can take", f, k)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ","), nil
}

// interceptArgs is weft-init's command line (bootstrap/intercept's flags,
// Istio's letters) from the pod's traffic annotations.
func interceptArgs(ann map[string]string, f string) ([]string, error) {
	include := "*"
	if v, ok := ann[IncludeInboundPortsAnnotation]; ok {
		if strings.TrimSpace(v) != "*" {
			ports, err := portList(v, f, IncludeInboundPortsAnnotation)
			if err != nil {
				return nil, err
			}
			include = ports
		}
	}
	args := []string{"intercept",
		"-p", strconv.Itoa(OutboundPort), "-z", strconv.Itoa(InboundPort),
		"-u", strconv.Itoa(ProxyUID), "-g", strconv.Itoa(ProxyGID),
		"-b", include}
	for _, a := range []struct{ flag, ann string }{{"-d", ExcludeInboundPortsAnnotation}, {"-o", ExcludeOutboundPortsAnnotation}} {
		if v, ok := ann[a.ann]; ok {
			ports, err := portList(v, f, a.ann)
			if err != nil {
				return nil, err
			}
			if ports != "" {
				args = append(args, a.flag, ports)
			}
		}
	}
	if v, ok := ann[ExcludeOutboundIPRangesAnnotation]; ok {
		cidrs, err := cidrList(v, f)
		if err != nil {
			return nil, err
		}
		if cidrs != "" {
			args = append(args, "-x", cidrs)
		}
	}
	return append(args, "--dns-port", strconv.Itoa(DNSPort), "--mode", "iptables"), nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func portList(v, f, ann string) (string, error) {
	items := splitList(v)
	if len(items) > MaxAnnotationPorts {
		return "", fmt.Errorf("%smetadata.annotations[%s]: %d ports, limit %d", f, ann, len(items), MaxAnnotationPorts)
	}
	for i, s := range items {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("%smetadata.annotations[%s]: item %d %q is not a port in 1..65535", f, ann, i, s)
		}
		items[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(items, ","), nil
}

func cidrList(v, f string) (string, error) {
	items := splitList(v)
	if len(items) > MaxAnnotationCIDRs {
		return "", fmt.Errorf("%smetadata.annotations[%s]: %d ranges, limit %d", f, ExcludeOutboundIPRangesAnnotation, len(items), MaxAnnotationCIDRs)
	}
	for i, s := range items {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return "", fmt.Errorf("%smetadata.annotations[%s]: item %d %q is not a CIDR (e.g. 10.0.0.0/8)", f, ExcludeOutboundIPRangesAnnotation, i, s)
		}
		items[i] = p.Masked().String()
	}
	return strings.Join(items, ","), nil
}

// apply makes the mutation on the typed template (what the patch does to JSON).
func (m *mutation) apply(t template) {
	spec := t.spec
	spec.InitContainers = append([]corev1.Container{m.init, m.proxy}, spec.InitContainers...)
	spec.Volumes = append(spec.Volumes, m.volumes...)
	for _, r := range m.probes {
		p := probeField(&spec.Containers[r.container], r.field)
		g := r.httpGet
		p.HTTPGet = &g
	}
	if t.meta.Annotations == nil {
		t.meta.Annotations = map[string]string{}
	}
	t.meta.Annotations[StatusAnnotation] = m.status
}

func probeField(c *corev1.Container, field string) *corev1.Probe {
	switch field {
	case "livenessProbe":
		return c.LivenessProbe
	case "readinessProbe":
		return c.ReadinessProbe
	}
	return c.StartupProbe
}

// patch is the JSONPatch for the template as it is before apply: the fewest
// operations, each touching only what injection adds or rewrites, so fields this
// package's API types do not know (a newer Kubernetes') are kept.
func (m *mutation) patch(t template) []Op {
	var ops []Op
	for _, r := range m.probes {
		ops = append(ops, Op{Op: "replace", Path: fmt.Sprintf("%s/spec/containers/%d/%s/httpGet", t.path, r.container, r.field), Value: r.httpGet})
	}
	if len(t.spec.InitContainers) == 0 {
		ops = append(ops, Op{Op: "add", Path: t.path + "/spec/initContainers", Value: []corev1.Container{m.init, m.proxy}})
	} else {
		ops = append(ops, Op{Op: "add", Path: t.path + "/spec/initContainers/0", Value: m.init},
			Op{Op: "add", Path: t.path + "/spec/initContainers/1", Value: m.proxy})
	}
	if len(t.spec.Volumes) == 0 {
		ops = append(ops, Op{Op: "add", Path: t.path + "/spec/volumes", Value: m.volumes})
	} else {
		for _, v := range m.volumes {
			ops = append(ops, Op{Op: "add", Path: t.path + "/spec/volumes/-", Value: v})
		}
	}
	switch {
	case isZero(t.meta):
		// A template may have no metadata at all: add it whole.
		ops = append(ops, Op{Op: "add", Path: t.path + "/metadata", Value: map[string]any{"annotations": map[string]string{StatusAnnotation: m.status}}})
	case len(t.meta.Annotations) == 0:
		ops = append(ops, Op{Op: "add", Path: t.path + "/metadata/annotations", Value: map[string]string{StatusAnnotation: m.status}})
	default:
		ops = append(ops, Op{Op: "add", Path: t.path + "/metadata/annotations/" + escape(StatusAnnotation), Value: m.status})
	}
	return ops
}

func isZero(m *metav1.ObjectMeta) bool {
	b, err := json.Marshal(m)
	return err == nil && string(b) == "{}"
}

// escape is a JSON pointer reference token (RFC 6901).
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

func ptr[T any](v T) *T { return &v }
