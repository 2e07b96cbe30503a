//go:build linux

package redirect

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/tools/testkit"
)

// setup makes a node with one pod, attaches cfg to the pod's cgroup and moves
// this test process into it (the app's and the proxy's sockets are then the
// pod's). Cleanups, last first: leave the cgroup, detach, remove pod and node.
func setup(t testing.TB, cfg Config) (*pods.Node, *pods.Pod, *Redirect) {
	t.Helper()
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	r := attachTo(t, pod, cfg)
	enterCgroup(t, pod.Cgroup)
	return node, pod, r
}

// accept takes one connection from ln within ioTimeout.
func accept(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept on %s: %v", ln.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// noConn checks nothing is waiting on ln.
func noConn(t *testing.T, ln net.Listener) {
	t.Helper()
	if err := ln.(*net.TCPListener).SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatalf("%s got a connection from %s it should not have", ln.Addr(), c.RemoteAddr())
	}
}

// checkRedirected: the client c's connection arrived at proxy with
// SO_ORIGINAL_DST and the client's getpeername both want, and carries bytes.
func checkRedirected(t *testing.T, proxy net.Listener, c net.Conn, want netip.AddrPort) {
	t.Helper()
	s := accept(t, proxy)
	if got, wantPeer := s.RemoteAddr().String(), c.LocalAddr().String(); got != wantPeer {
		t.Fatalf("proxy accepted %s, want the client %s", got, wantPeer)
	}
	od, err := OriginalDst(s.(*net.TCPConn))
	if err != nil {
		t.Fatalf("OriginalDst: %v", err)
	}
	if od.Addr().Unmap() != want.Addr() || od.Port() != want.Port() {
		t.Fatalf("SO_ORIGINAL_DST = %s, want %s", od, want)
	}
	if got := tcpAddrPort(c.RemoteAddr()); got != want {
		t.Fatalf("client's getpeername = %s, want %s", got, want)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	_ = s.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("proxy read %q, %v", buf, err)
	}
}

func stats(t *testing.T, r *Redirect) Stats {
	t.Helper()
	s, err := r.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedirectIPv4(t *testing.T) {
	node, n, r := setup(t, Config{})
	proxy := listen(t, n, "tcp4", "127.0.0.1:15001")
	want := netip.AddrPortFrom(node.Gateway, 8080)
	up := listen(t, node, "tcp4", want.String())

	c, err := dial(n, "tcp4", want.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRedirected(t, proxy, c, want)
	noConn(t, up)

	// An explicit client of the proxy is not redirected and has no original destination.
	c2, err := dial(n, "tcp4", "127.0.0.1:15001", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2 := accept(t, proxy)
	if od, err := OriginalDst(s2.(*net.TCPConn)); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("explicit client's SO_ORIGINAL_DST = %v, %v; want ENOENT", od, err)
	}
	if st := stats(t, r); st.Redirected != 1 || st.OrigDstAnswered != 1 || st.OrigDstMissed != 1 {
		t.Fatalf("stats %+v, want 1 redirected, 1 answered, 1 missed", st)
	}

	// DNS off: UDP to port 53 is left alone.
	dns := node.ListenPacket(t, "udp4", node.DNSAddr().String())
	u, err := dial(n, "udp4", node.DNSAddr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	_ = dns.SetReadDeadline(time.Now().Add(ioTimeout))
	buf := make([]byte, 16)
	if _, from, err := dns.ReadFrom(buf); err != nil || from.String() != u.LocalAddr().String() {
		t.Fatalf("upstream UDP 53 read from %v, %v; want the client directly", from, err)
	}

	// Closed: new connections go where they were sent.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	c3, err := dial(n, "tcp4", want.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	accept(t, up)
}

// TestRedirectIPv4MappedDualStackClient: an AF_INET6 socket (not V6ONLY)
// connecting to ::ffff:a.b.c.d only passes connect6.
func TestRedirectIPv4MappedDualStackClient(t *testing.T) {
	node, n, _ := setup(t, Config{})
	proxy := listen(t, n, "tcp4", "127.0.0.1:15001")
	want := netip.AddrPortFrom(node.Gateway, 8080)
	up := listen(t, node, "tcp4", want.String())
	c := dialDualStack(t, n, want)
	defer c.Close()
	checkRedirected(t, proxy, c, want)
	noConn(t, up)
}

func TestRedirectIPv6(t *testing.T) {
	node, n, _ := setup(t, Config{})
	proxy := listen(t, n, "tcp6", "[::1]:15001")
	want := netip.AddrPortFrom(node.Gateway6, 8080)
	up := listen(t, node, "tcp6", want.String())
	c, err := dial(n, "tcp6", want.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRedirected(t, proxy, c, want)
	noConn(t, up)
}

// TestProxyNotRedirected: the sidecar's uid and, when set, mark are excluded.
func TestProxyNotRedirected(t *testing.T) {
	node, n, r := setup(t, Config{ExcludeMark: 0x539})
	proxy := listen(t, n, "tcp4", "127.0.0.1:15001")
	target := netip.AddrPortFrom(node.Gateway, 8080)
	up := listen(t, node, "tcp4", target.String())

	t.Run("uid", func(t *testing.T) {
		// bash's /dev/tcp: a client that is not this process, as the proxy's uid.
		cmd := n.As(pods.Proxy()).Command("bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && echo hi >&3", target.Addr(), target.Port()))
		cmd.Dir = "/"
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s := accept(t, up)
		buf := make([]byte, 3)
		_ = s.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hi\n" {
			t.Fatalf("upstream read %q, %v", buf, err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("uid %d client: %v: %s", DefaultProxyUID, err, out.String())
		}
	})
	t.Run("mark", func(t *testing.T) {
		d := &net.Dialer{Timeout: ioTimeout, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, 0x539)
			}); err != nil {
				return err
			}
			return serr
		}}
		c, err := dial(n, "tcp4", target.String(), d)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		accept(t, up)
	})
	noConn(t, proxy)
	if st := stats(t, r); st.Excluded != 2 || st.Redirected != 0 {
		t.Fatalf("stats %+v, want 2 excluded, 0 redirected", st)
	}
}

// fakeDNS answers every datagram on pc with "re:"+query to its sender.
func fakeDNS(pc net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(append([]byte("re:"), buf[:n]...), from)
	}
}

// readReply reads one answer on pc and returns its source as the app sees it.
func readReply(t *testing.T, pc net.PacketConn, query string) netip.AddrPort {
	t.Helper()
	_ = pc.SetReadDeadline(time.Now().Add(ioTimeout))
	buf := make([]byte, 512)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("read DNS reply: %v", err)
	}
	if got := string(buf[:n]); got != "re:"+query {
		t.Fatalf("reply %q, want %q", got, "re:"+query)
	}
	return tcpAddrPort(from)
}

// TestDNSRedirect: UDP (connected and not) and TCP to port 53 reach the DNS
// proxy, and the app sees replies come from the server it asked.
func TestDNSRedirect(t *testing.T) {
	_, n, r := setup(t, Config{DNS: true})
	for _, addr := range []string{"127.0.0.1:15053", "[::1]:15053"} {
		network := "udp4"
		if strings.HasPrefix(addr, "[") {
			network = "udp6"
		}
		pc := n.ListenPacket(t, network, addr)
		done := make(chan struct{})
		go func() { defer close(done); fakeDNS(pc) }()
		t.Cleanup(func() { pc.Close(); <-done })
	}
	dnsTCP := listen(t, n, "tcp4", "127.0.0.1:15053")
	server := netip.MustParseAddrPort("10.250.0.53:53")
	server6 := netip.MustParseAddrPort("[fd00:250::53]:53")

	t.Run("udp4 connected", func(t *testing.T) {
		c, err := dial(n, "udp4", server.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		if from := readReply(t, c.(*net.UDPConn), "a"); from != server {
			t.Fatalf("reply from %s, want %s", from, server)
		}
		if got := tcpAddrPort(c.RemoteAddr()); got != server {
			t.Fatalf("getpeername %s, want %s", got, server)
		}
	})
	t.Run("udp4 sendto", func(t *testing.T) {
		pc := n.ListenPacket(t, "udp4", "0.0.0.0:0")
		if _, err := pc.WriteTo([]byte("b"), net.UDPAddrFromAddrPort(server)); err != nil {
			t.Fatal(err)
		}
		if from := readReply(t, pc, "b"); from != server {
			t.Fatalf("reply from %s, want %s", from, server)
		}
	})
	t.Run("udp6 connected", func(t *testing.T) {
		c, err := dial(n, "udp6", server6.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("c")); err != nil {
			t.Fatal(err)
		}
		if from := readReply(t, c.(*net.UDPConn), "c"); from != server6 {
			t.Fatalf("reply from %s, want %s", from, server6)
		}
	})
	t.Run("tcp4", func(t *testing.T) {
		c, err := dial(n, "tcp4", server.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkRedirected(t, dnsTCP, c, server)
	})
	if st := stats(t, r); st.DNSRedirected != 4 || st.Redirected != 0 {
		t.Fatalf("stats %+v, want 4 DNS redirects", st)
	}
}

// ebpfUser is the sidecar in eBPF mode: uid 1337 with exactly these ambient
// capabilities (what the injector's securityContext grants).
func ebpfUser() pods.User { return pods.Proxy("net_admin", "bpf", "perfmon") }

// TestSIGKILLLeavesNothingAttached: a process of the sidecar's identity
// attaches to its own pod's cgroup; SIGKILLed, its links and programs go, and
// after the cgroup is removed no link names it.
func TestSIGKILLLeavesNothingAttached(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	ino := cgroupID(t, pod.Cgroup)
	cmd := pod.As(ebpfUser()).Command(node.TestBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), attacherEnv+"=own")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("attacher: %v", err)
	}
	var links []link.ID
	var progs []ebpf.ProgramID
	for _, f := range strings.Fields(line) {
		id, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("attacher said %q", line)
		}
		l, err := link.NewFromID(link.ID(id))
		if err != nil {
			t.Fatalf("link %d: %v", id, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if cgi := info.Cgroup(); cgi == nil || cgi.CgroupId != ino {
			t.Fatalf("link %d is not on cgroup %s (id %d): %+v", id, pod.Cgroup, ino, info.Cgroup())
		}
		links = append(links, link.ID(id))
		progs = append(progs, info.Program)
	}
	if len(links) != 11 {
		t.Fatalf("attacher made %d links, want 11 (DNS on)", len(links))
	}
	if n := linksOnCgroup(t, ino); n != 11 {
		t.Fatalf("%d links on the cgroup, want 11", n)
	}

	// The process itself: ip netns exec and setpriv exec it, same PID.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testkit.Wait(t, ioTimeout, func() error {
		for _, id := range links {
			if l, err := link.NewFromID(id); err == nil {
				l.Close()
				return fmt.Errorf("link %d still exists", id)
			}
		}
		for _, id := range progs {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				p.Close()
				return fmt.Errorf("program %d still loaded", id)
			}
		}
		return nil
	})
	if n := linksOnCgroup(t, ino); n != 0 {
		t.Fatalf("%d links on the cgroup after SIGKILL", n)
	}
	if err := pod.Close(); err != nil {
		t.Fatalf("remove pod: %v", err)
	}
	if n := linksOnCgroup(t, ino); n != 0 {
		t.Fatalf("%d links still name the removed cgroup", n)
	}
}

// linksOnCgroup counts the kernel's cgroup links on cgroup id ino.
func linksOnCgroup(t *testing.T, ino uint64) int {
	t.Helper()
	var it link.Iterator
	defer it.Close()
	n := 0
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue // went away meanwhile
		}
		if cgi := info.Cgroup(); cgi != nil && cgi.CgroupId == ino {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSelfTest(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	n := node.AddPod(t, "app", "")
	t.Run("outside the cgroup", func(t *testing.T) {
		err := n.Do(func() error { return SelfTest(t.Context(), n.Cgroup) })
		if err == nil || !strings.Contains(err.Error(), "not redirected") {
			t.Fatalf("SelfTest from outside the cgroup = %v, want 'not redirected'", err)
		}
	})
	t.Run("cgroup root", func(t *testing.T) {
		root, err := CgroupMount()
		if err != nil {
			t.Fatal(err)
		}
		err = n.Do(func() error { return SelfTest(t.Context(), root) })
		if err == nil || !strings.Contains(err.Error(), "cgroup v2 root") {
			t.Fatalf("SelfTest(root) = %v", err)
		}
	})
	t.Run("inside", func(t *testing.T) {
		enterCgroup(t, n.Cgroup)
		if err := n.Do(func() error { return SelfTest(t.Context(), n.Cgroup) }); err != nil {
			t.Fatalf("SelfTest: %+v", err)
		}
		if l := linksOnCgroup(t, cgroupID(t, n.Cgroup)); l != 0 {
			t.Fatalf("SelfTest left %d links", l)
		}
	})
	t.Run("as the sidecar", func(t *testing.T) {
		// uid 1337 with only the eBPF mode's capabilities, in its own cgroup.
		cmd := n.As(ebpfUser()).Command(node.TestBinary(t), "-test.run=^$")
		cmd.Env = append(os.Environ(), selfTestEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("SelfTest as uid %d with net_admin,bpf,perfmon: %v: %s", pods.ProxyUID, err, out)
		}
	})
}

func cgroupID(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
