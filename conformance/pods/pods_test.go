package pods

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/tools/testkit"
	"github.com/weft-mesh/weft/tools/testkit/proc"
)

// childEnv makes the test binary a child test process of TestCleanupAfterFailure
// and TestSweepAfterKill: "fail" or "hang".
const childEnv = "WEFT_PODS_TEST_CHILD"

func TestMain(m *testing.M) {
	if err := Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(proc.Cleanup))
}

// Unprivileged: the parts that need no root.
func TestOwnerPID(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  int
	}{
		{"wp123x00ab-node", 123}, {"wp123x", 123}, {"wp1x", 1},
		{"wp123", 0}, {"wpx12", 0}, {"xp123x1", 0}, {"wp12a3x1", 0}, {"wp99999999999x1", 0}, {"", 0},
	} {
		if got := ownerPID(c.name); got != c.pid {
			t.Errorf("ownerPID(%q) = %d, want %d", c.name, got, c.pid)
		}
	}
}

func TestUserSetpriv(t *testing.T) {
	if got := (User{}).setpriv(); got != nil {
		t.Errorf("root: %q, want no setpriv", got)
	}
	if got, want := strings.Join(Proxy().setpriv(), " "), "setpriv --reuid 1337 --regid 1337 --clear-groups --"; got != want {
		t.Errorf("Proxy(): %q, want %q", got, want)
	}
	got := strings.Join(Proxy("NET_ADMIN", "cap_bpf").setpriv(), " ")
	if want := "setpriv --reuid 1337 --regid 1337 --clear-groups --inh-caps +net_admin,+bpf --ambient-caps +net_admin,+bpf --"; got != want {
		t.Errorf("Proxy(caps): %q, want %q", got, want)
	}
}

func TestAddresses(t *testing.T) {
	if got := hostAddr(subnet4, FirstPod).String(); got != "10.250.0.11" {
		t.Errorf("v4: %s", got)
	}
	if got := hostAddr(subnet6, FirstPod).String(); got != "fd00:250::11" {
		t.Errorf("v6: %s", got)
	}
	if got := hostAddr(subnet6, 254).String(); got != "fd00:250::254" {
		t.Errorf("v6 last: %s", got)
	}
}

func TestRequireFailsWhenForbiddenToSkip(t *testing.T) {
	if Privileged() == nil {
		t.Skip("privileged here: nothing to skip")
	}
	// Not root: Require must fail, not skip, under RequireEnv=1 (run as a child).
	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoPodsTalk$", "-test.count=1")
	cmd.Env = append(os.Environ(), RequireEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "forbids skipping") {
		t.Fatalf("with %s=1: err %v, output:\n%s", RequireEnv, err, out)
	}
}

// echo serves ln: each connection gets "<its remote address> <first line>".
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			l, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "%s %s", c.RemoteAddr(), l)
		}()
	}
}

func TestTwoPodsTalk(t *testing.T) {
	n := NewNode(t)
	a, b := n.AddPod(t, "a", "shop"), n.AddPod(t, "b", "shop")
	for _, addr := range []string{b.Addr(8080), b.Addr6(8080)} {
		ln := b.Listen(t, "tcp", addr)
		go echo(ln)
		c, err := a.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("a -> %s: %v", addr, err)
		}
		fmt.Fprintf(c, "ping\n")
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		host, _, _ := net.SplitHostPort(strings.Fields(string(got))[0])
		if want := a.IP; strings.Contains(addr, "[") {
			want = a.IP6
			if host != want.String() {
				t.Errorf("b saw %s, want a's %s", got, want)
			}
		} else if host != want.String() {
			t.Errorf("b saw %s, want a's %s", got, want)
		}
		t.Logf("a -> %s: %s", addr, strings.TrimSpace(string(got)))
	}
	// The node (where pilot runs) reaches a pod and a pod the node.
	ln := n.Listen(t, "tcp4", netipPort(n.Gateway.String(), 15010))
	go echo(ln)
	if c, err := b.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatalf("b -> node: %v", err)
	} else {
		c.Close()
	}
	// The namespaces are separate: the same port is free in each.
	a.Listen(t, "tcp", "0.0.0.0:15001")
	b.Listen(t, "tcp", "0.0.0.0:15001")

	// A process: curl in a to an HTTP server in b (in-process there).
	hl := b.Listen(t, "tcp4", b.Addr(9080))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from b, you are %s", r.RemoteAddr)
	})}
	go srv.Serve(hl)
	t.Cleanup(func() { srv.Close() })
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := a.Command("curl", "-sS", "--max-time", "5", "http://"+b.Addr(9080)+"/").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "hello from b, you are "+a.IP.String()+":") {
			t.Errorf("curl in a: %v: %s", err, out)
		}
	}
	hc := a.HTTPClient(5 * time.Second)
	resp, err := hc.Get("http://" + b.Addr(9080) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "hello from b") {
		t.Errorf("a's HTTPClient: %q", body)
	}
	if _, err := hc.Get("http://reviews.shop:9080/"); err == nil || !strings.Contains(err.Error(), "IP literal") {
		t.Errorf("a name must be refused by HTTPClient, got %v", err)
	}
}

func netipPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func TestPodProcess(t *testing.T) {
	n := NewNode(t)
	a := n.AddPod(t, "a", "shop")
	out, err := a.Command("cat", "/etc/resolv.conf", "/proc/self/cgroup").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	root, _ := CgroupRoot()
	rel := strings.TrimPrefix(a.Cgroup, root)
	if !strings.HasPrefix(string(out), a.ResolvConf()) || !strings.HasPrefix(a.ResolvConf(), "nameserver 10.250.0.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\n") {
		t.Errorf("resolv.conf in the pod:\n%s\nwant:\n%s", out, a.ResolvConf())
	}
	if !strings.Contains(string(out), "\n0::"+rel+"\n") {
		t.Errorf("cgroup in the pod:\n%s\nwant 0::%s", out, rel)
	}
	// The cgroup2 hierarchy is visible at /sys/fs/cgroup (ip netns exec remounts
	// /sys), with the process in its pod's cgroup there; /sys/class/net is the pod's.
	out, err = a.As(Proxy()).Command("sh", "-c", "grep -c \"^$$\\$\" /sys/fs/cgroup"+rel+"/cgroup.procs; ls /sys/class/net").CombinedOutput()
	if err != nil || string(out) != "1\neth0\nlo\n" {
		t.Errorf("cgroup2 at /sys/fs/cgroup in the pod: %v: %q", err, out)
	}
	// As the proxy, with eBPF mode's ambient capabilities.
	out, err = a.As(Proxy("net_admin", "bpf", "perfmon")).Command("sh", "-c", "id -u; id -g; id -G; grep CapAmb /proc/self/status").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got, want := string(out), "1337\n1337\n1337\nCapAmb:\t000000c000001000\n"; got != want {
		t.Errorf("as proxy: %q, want %q", got, want)
	}
	// The test binary copy runs as the proxy (go test's build dir is 0700).
	bin := n.TestBinary(t)
	if out, err := a.As(Proxy()).Command(bin, "-test.run=^$").CombinedOutput(); err != nil {
		t.Errorf("test binary as the proxy: %v: %s", err, out)
	}
	// A Runner's TempDir is the user's.
	d := a.As(Proxy()).TempDir(t)
	if out, err := a.As(Proxy()).Command("touch", filepath.Join(d, "f")).CombinedOutput(); err != nil {
		t.Errorf("proxy writing its TempDir: %v: %s", err, out)
	}
	// A long-running process, put in the pod's cgroup from the fork: the pod's
	// removal kills it even if nobody stops it (proc.Start stops it first here).
	p := proc.StartIn(t, a.As(Proxy()), "sleeper", "sleep", "1000")
	testkit.Wait(t, 10*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(a.Cgroup, "cgroup.procs"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), strconv.Itoa(p.Cmd.Process.Pid)+"\n") {
			return fmt.Errorf("pid %d not in %s: %q", p.Cmd.Process.Pid, a.Cgroup, b)
		}
		return nil
	})
}

// leftovers lists what exists of a node named name: netns, /etc/netns dirs,
// cgroups and temp dirs.
func leftovers(t *testing.T, name string) []string {
	t.Helper()
	var left []string
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, name+"-") {
			left = append(left, "netns "+l)
		}
	}
	root, err := CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, pat := range []string{filepath.Join(netnsDir, name+"*"), filepath.Join(etcNetns, name+"*"), filepath.Join(root, name+"*"), filepath.Join(tmpDir(), name+"*")} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, m...)
	}
	return left
}

func TestCleanupLeavesNothing(t *testing.T) {
	Require(t)
	var name string
	t.Run("pods", func(t *testing.T) {
		n := NewNode(t)
		name = n.Name
		a := n.AddPod(t, "a", "shop")
		n.AddPod(t, "b", "")
		n.TestBinary(t)
		// Not stopped by anyone but the pod's removal (cgroup.kill).
		if err := a.As(Proxy()).Command("sleep", "1000").Start(); err != nil {
			t.Fatal(err)
		}
		if l := leftovers(t, name); len(l) < 7 {
			t.Fatalf("expected the node's pieces to exist, found %q", l)
		}
	})
	if l := leftovers(t, name); len(l) > 0 {
		t.Errorf("left after the test: %q", l)
	}
}

// child runs in a child test process: it makes a node with two pods and a
// process, prints the node's name, and then fails or hangs.
func TestChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only as a child of TestCleanupAfterFailure/TestSweepAfterKill")
	}
	n := NewNode(t)
	a := n.AddPod(t, "a", "shop")
	n.AddPod(t, "b", "shop")
	n.TestBinary(t)
	if err := a.Command("sleep", "1000").Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("NODE %s\n", n.Name)
	if mode == "hang" {
		select {}
	}
	t.Fatal("failing on purpose")
}

// startChild runs TestChild in mode and returns the node name it printed.
func startChild(t *testing.T, mode string) (*exec.Cmd, string, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			cmd.Wait()
			t.Fatalf("child ended without naming its node: %v", err)
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(l), "NODE "); ok {
			return cmd, name, r
		}
	}
}

func TestCleanupAfterFailure(t *testing.T) {
	Require(t)
	cmd, name, r := startChild(t, "fail")
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err == nil || !strings.Contains(string(rest), "failing on purpose") {
		t.Fatalf("child: %v, want a failure:\n%s", err, rest)
	}
	if l := leftovers(t, name); len(l) > 0 {
		t.Errorf("left after a failed test: %q", l)
	}
}

func TestSweepAfterKill(t *testing.T) {
	Require(t)
	live := NewNode(t) // this process's: the sweep must leave it alone
	cmd, name, _ := startChild(t, "hang")
	if l := leftovers(t, name); len(l) < 7 {
		t.Fatalf("expected the child's node to exist, found %q", l)
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its PID is no longer alive
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, name); len(l) > 0 {
		t.Errorf("left after the sweep: %q", l)
	}
	if l := leftovers(t, live.Name); len(l) < 3 {
		t.Errorf("the sweep removed a live node's pieces, left %q", l)
	}
}

func TestPilotAndSidecarInPods(t *testing.T) {
	n := NewNode(t)
	a := n.AddPod(t, "a", "shop")
	pilot := proc.StartPilotIn(t, n, n.Gateway.String(), n.TempDir(t))
	pilot.Apply(t, `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: 9080, protocol: HTTP}]
`)
	sc := proc.StartSidecar(t, proc.SidecarConfig{
		NodeID: "a", Namespace: "shop", ServiceAccount: "default", Labels: map[string]string{"app": "frontend"},
		IP: a.IP.String(), Pilot: pilot, Netns: a.As(Proxy()),
	})
	hc := a.HTTPClient(2 * time.Second)
	testkit.Wait(t, 30*time.Second, func() error {
		select {
		case <-sc.Exited():
			t.Fatalf("sidecar exited: %v\n%s", sc.Err(), sc.Logs.String())
		default:
		}
		resp, err := hc.Get(sc.ReadyURL())
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("ready: %s", resp.Status)
		}
		return nil
	})
	if _, err := sc.Metric("weft_"); err != nil {
		t.Errorf("sidecar metrics from inside the pod: %v", err)
	}
	// The sidecar runs as the proxy user in a's cgroup.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sc.Cmd.Process.Pid))
	if err != nil || !strings.Contains(string(b), "\nUid:\t1337\t1337\t1337\t1337\n") {
		t.Errorf("sidecar's status: %v\n%s", err, b)
	}
	if _, err := pilot.ProxyStatus("a"); err != nil {
		t.Errorf("pilot's status of the sidecar: %v", err)
	}
}

// Unprivileged: pod names and the MaxPods bound (nothing is made: newPod only
// takes the addresses).
func TestPodNamesAndBound(t *testing.T) {
	n, err := newNode()
	if err != nil {
		t.Skip(err) // no cgroup2 mount: the node cannot even be named
	}
	for _, bad := range []string{"", "A", "a_b", "node", "a.b"} {
		if _, err := n.newPod(bad, ""); err == nil {
			t.Errorf("pod name %q accepted", bad)
		}
	}
	for i := range MaxPods {
		p, err := n.newPod(fmt.Sprintf("p%d", i), "")
		if err != nil {
			t.Fatalf("pod %d of %d: %v", i+1, MaxPods, err)
		}
		if i == MaxPods-1 && p.IP.String() != "10.250.0.254" {
			t.Errorf("last pod's address %s, want 10.250.0.254", p.IP)
		}
	}
	if _, err := n.newPod("one-more", ""); err == nil || !strings.Contains(err.Error(), "MaxPods") {
		t.Errorf("pod %d: %v, want the MaxPods error", MaxPods+1, err)
	}
	if _, err := n.newPod("p0", ""); err == nil {
		t.Error("a second pod p0 accepted")
	}
	if p := n.Pods(); len(p) != MaxPods || p[0].Namespace != "default" {
		t.Errorf("%d pods, first of namespace %q", len(p), p[0].Namespace)
	}
}

// New, NewPod and Close: the API outside tests (tools/demo).
func TestNewAndClose(t *testing.T) {
	Require(t)
	n, err := New()
	if err != nil {
		t.Fatal(err)
	}
	a, err := n.NewPod("a", "shop")
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	if out, err := a.Command("ip", "-br", "addr", "show", "eth0").CombinedOutput(); err != nil || !strings.Contains(string(out), "10.250.0.11/24") {
		t.Errorf("pod a's eth0: %v %s", err, out)
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
	if err := n.Close(); err != nil {
		t.Error(err)
	}
	if l := leftovers(t, n.Name); len(l) > 0 {
		t.Errorf("left after Close: %q", l)
	}
}
