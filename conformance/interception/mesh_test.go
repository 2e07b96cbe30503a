package interception

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// within bounds every wait on the mesh: a push, a handshake, a process start.
const within = 30 * time.Second

// The Services' fixed VIPs (reviews gets one allocated by pilot): two TCP
// Services on the same port, told apart by address only; echo-v1 also has an
// IPv6 VIP.
const (
	echoV1VIP  = "240.240.7.1"
	echoV1VIP6 = "fd00:240::7:1"
	echoV2VIP  = "240.240.7.2"
)

// meshYAML: reviews (HTTP 9080 and gRPC 9090 on pod b), echo-v1 and echo-v2
// (TCP, both port 7000, on pod b's 7001 and 7002), STRICT mTLS at reviews, and
// outboundTrafficPolicy as given.
func meshYAML(outbound string) string {
	return fmt.Sprintf(`apiVersion: mesh.weft.dev/v1alpha1
kind: MeshConfig
metadata: {name: default}
spec:
  trustDomain: cluster.local
  outboundTrafficPolicy: %s
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 9080, protocol: HTTP}
  - {name: grpc, port: 9090, targetPort: 9090, protocol: GRPC}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: echo-v1, namespace: shop}
spec:
  selector: {app: reviews}
  addresses: [%s, %s]
  ports: [{name: tcp, port: 7000, targetPort: 7001, protocol: TCP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: echo-v2, namespace: shop}
spec:
  selector: {app: reviews}
  addresses: [%s]
  ports: [{name: tcp, port: 7000, targetPort: 7002, protocol: TCP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: PeerAuthentication
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  mtls: STRICT
`, outbound, echoV1VIP, echoV1VIP6, echoV2VIP)
}

// mesh is one node: pilot in the node's namespace, pod a (frontend) and pod b
// (reviews) of namespace shop each with the real sidecar as uid 1337 after the
// real `sidecar intercept`, and pod c (outside: no sidecar, not in the mesh).
type mesh struct {
	t       *testing.T
	mode    string // iptables | ebpf
	node    *pods.Node
	a, b, c *pods.Pod
	pilot   *proc.PilotProcess
	sa, sb  *proc.SidecarProcess
	bin     string // the test binary, runnable in pods (the clients)
	sidecar string // bin/sidecar
	hits    *hits  // b's HTTP app
}

// newMesh builds the mesh in mode and waits until a reaches reviews by name.
// before, when not nil, runs after the node exists and before the pods do (its
// cleanups then run after theirs).
func newMesh(t *testing.T, mode string, before func(*pods.Node)) *mesh {
	t.Helper()
	m := &mesh{t: t, mode: mode, node: pods.NewNode(t), hits: &hits{n: map[string]int{}}}
	if before != nil {
		before(m.node)
	}
	m.sidecar = proc.Build(t, proc.Sidecar)
	m.bin = m.node.TestBinary(t)
	m.a = m.node.AddPod(t, "frontend", "shop")
	m.b = m.node.AddPod(t, "reviews", "shop")
	m.c = m.node.AddPod(t, "outside", "shop")

	// The node's upstream DNS: names outside the mesh.
	go upstream{hosts: map[string]netip.Addr{"outside.example.": m.c.IP}}.serve(m.node.ListenPacket(t, "udp4", m.node.DNSAddr().String()))
	m.serveApps()

	m.pilot = proc.StartPilotIn(t, m.node, m.node.Gateway.String(), m.node.TempDir(t), proc.Secure())
	m.pilot.Apply(t, meshYAML("ALLOW_ANY"))

	initArgs := []string{}
	user := pods.Proxy()
	if mode == "ebpf" {
		initArgs = append(initArgs, "--mode", "ebpf")
		user = pods.Proxy("net_admin", "bpf", "perfmon")
	}
	for _, p := range []*pods.Pod{m.a, m.b} {
		m.intercept(p, initArgs...)
	}
	start := func(p *pods.Pod, app string) *proc.SidecarProcess {
		return proc.StartSidecar(t, proc.SidecarConfig{
			NodeID: app, Namespace: "shop", ServiceAccount: app, Labels: map[string]string{"app": app},
			IP: p.IP.String(), Pilot: m.pilot, Netns: p.As(user), Intercept: mode,
		})
	}
	m.sa, m.sb = start(m.a, "frontend"), start(m.b, "reviews")
	m.waitOK(m.a, "curl", "http://reviews.shop:9080/ready", "200 reviews ")
	return m
}

// intercept runs the init step in p: the real `sidecar intercept args` as root.
func (m *mesh) intercept(p *pods.Pod, args ...string) {
	m.t.Helper()
	out, err := p.Command(m.sidecar, append([]string{"intercept"}, args...)...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("sidecar intercept %q in %s: %v\n%s", args, p.Name, err, out)
	}
}

// hits counts b's HTTP requests by path.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) add(path string) {
	h.mu.Lock()
	h.n[path]++
	h.mu.Unlock()
}

func (h *hits) get(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[path]
}

// serveApps starts the apps, in the test process but in the pods' namespaces:
// b's reviews (HTTP on 9080 answering "reviews <peer> <path>", gRPC health on
// 9090, TCP echo-v1 on 7001 and echo-v2 on 7002 answering "<version> <peer>"),
// c's HTTP on 8080 ("outside <peer>").
func (m *mesh) serveApps() {
	t := m.t
	httpApp := func(p *pods.Pod, name string, port uint16) {
		ln := p.Listen(t, "tcp", fmt.Sprintf(":%d", port))
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.hits.add(r.URL.Path)
			fmt.Fprintf(w, "%s %s %s", name, r.RemoteAddr, r.URL.Path)
		})}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close(); <-done })
	}
	httpApp(m.b, "reviews", 9080)
	httpApp(m.c, "outside", 8080)

	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("reviews", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	gln := m.b.Listen(t, "tcp", ":9090")
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = gs.Serve(gln) }()
	t.Cleanup(func() { gs.Stop(); <-gdone })

	for _, e := range []struct {
		version string
		port    uint16
	}{{"v1", 7001}, {"v2", 7002}} {
		ln := m.b.Listen(t, "tcp", fmt.Sprintf(":%d", e.port))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(within))
					if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
						fmt.Fprintf(c, "%s %s\n", e.version, c.RemoteAddr())
					}
				}()
			}
		}()
		t.Cleanup(func() { ln.Close(); wg.Wait() })
	}
}

// get runs one unmodified client in p: curl, or the test binary as the Go
// net/http client (http), the gRPC client (grpc), the raw TCP client (tcp,
// tcp4, tcp6) or a resolver lookup (lookup). It returns what the client got:
// "<status> <body>" for curl and http.
func (m *mesh) get(p *pods.Pod, kind, target string) (string, error) {
	var cmd *exec.Cmd
	if kind == "curl" {
		cmd = p.Command("curl", "-sS", "--max-time", "5", "-o", "-", "-w", " %{http_code}", target)
	} else {
		cmd = p.Command(m.bin, target)
		cmd.Env = append(os.Environ(), clientEnv+"="+kind)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	// The clients bound themselves; this is the backstop.
	kill := time.AfterFunc(clientTimeout+5*time.Second, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	kill.Stop()
	out := strings.TrimSpace(stdout.String())
	if kind == "curl" {
		// body then " code": as "code body"
		if i := strings.LastIndexByte(out, ' '); i >= 0 {
			out = out[i+1:] + " " + out[:i]
		}
	}
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %v: %s %s", kind, target, p.Name, err, out, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// waitOK waits until the client's answer starts with want.
func (m *mesh) waitOK(p *pods.Pod, kind, target, want string) string {
	m.t.Helper()
	var got string
	testkit.Wait(m.t, within, func() error {
		var err error
		got, err = m.get(p, kind, target)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(got, want) {
			return fmt.Errorf("%s %s in %s: got %q, want %q...", kind, target, p.Name, got, want)
		}
		return nil
	})
	return got
}

// waitFail waits until the client fails (or answers something not starting
// with ok).
func (m *mesh) waitFail(p *pods.Pod, kind, target, ok string) {
	m.t.Helper()
	testkit.Wait(m.t, within, func() error {
		got, err := m.get(p, kind, target)
		if err == nil && strings.HasPrefix(got, ok) {
			return fmt.Errorf("%s %s in %s still answered %q", kind, target, p.Name, got)
		}
		return nil
	})
}

// metric reads one sample of s's /metrics (0 when absent).
func (m *mesh) metric(s *proc.SidecarProcess, name string) float64 {
	m.t.Helper()
	v, err := s.MetricValue(name)
	if err != nil && !errors.Is(err, proc.ErrNoMetric) {
		m.t.Fatal(err)
	}
	return v
}

// peerHost is the host of the "<name> <peer> ..." an app answered.
func peerHost(t *testing.T, answer string) string {
	t.Helper()
	f := strings.Fields(answer)
	for i, w := range f {
		if i > 0 && strings.Contains(w, ":") {
			h, _, err := net.SplitHostPort(w)
			if err == nil {
				return strings.TrimPrefix(h, "::ffff:")
			}
		}
	}
	t.Fatalf("no peer address in %q", answer)
	return ""
}

// iptablesSave is p's ruleset (IPv4 and IPv6) as iptables-save prints it.
func (m *mesh) iptablesSave(p *pods.Pod) string {
	m.t.Helper()
	var all strings.Builder
	for _, c := range []string{"iptables-save", "ip6tables-save"} {
		out, err := p.Command(c).CombinedOutput()
		if err != nil {
			m.t.Fatalf("%s in %s: %v: %s", c, p.Name, err, out)
		}
		all.Write(out)
	}
	return all.String()
}
