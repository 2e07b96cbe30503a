//go:build linux

package redirect

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/conformance/pods"
)

// TestOwnAddrNotRedirected: a pod process calling its own pod address (IPv4,
// IPv6, IPv4-mapped on a dual-stack socket) reaches its own listener, as in
// iptables mode; other destinations are still redirected, and DNS to the pod's
// own address still goes to the DNS proxy. The pod's IPv4 address is the last
// of MaxOwnAddrs: the map holds all of them.
func TestOwnAddrNotRedirected(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	own := append(testAddrs(MaxOwnAddrs-2), pod.IP6, pod.IP)
	r := attachTo(t, pod, Config{OwnAddrs: own, DNS: true})
	enterCgroup(t, pod.Cgroup)

	proxy4 := listen(t, pod, "tcp4", "127.0.0.1:15001")
	proxy6 := listen(t, pod, "tcp6", "[::1]:15001")
	app4 := listen(t, pod, "tcp4", pod.Addr(8080))
	app6 := listen(t, pod, "tcp6", pod.Addr6(8080))
	self4 := netip.AddrPortFrom(pod.IP, 8080)
	self6 := netip.AddrPortFrom(pod.IP6, 8080)

	direct := func(t *testing.T, c net.Conn, ln net.Listener, want netip.AddrPort) {
		t.Helper()
		defer c.Close()
		s := accept(t, ln)
		if got, wantPeer := s.RemoteAddr().String(), c.LocalAddr().String(); got != wantPeer {
			t.Fatalf("%s accepted %s, want the client %s", ln.Addr(), got, wantPeer)
		}
		if got := tcpAddrPort(c.RemoteAddr()); got.Addr().Unmap() != want.Addr() || got.Port() != want.Port() {
			t.Fatalf("client's getpeername = %s, want %s", got, want)
		}
	}
	t.Run("ipv4", func(t *testing.T) {
		c, err := dial(pod, "tcp4", self4.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		direct(t, c, app4, self4)
	})
	t.Run("ipv6", func(t *testing.T) {
		c, err := dial(pod, "tcp6", self6.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		direct(t, c, app6, self6)
	})
	t.Run("ipv4-mapped", func(t *testing.T) {
		direct(t, dialDualStack(t, pod, self4), app4, self4)
	})
	noConn(t, proxy4)
	noConn(t, proxy6)
	if st := stats(t, r); st.Redirected != 0 {
		t.Fatalf("stats %+v: connections to the pod's own addresses were redirected", st)
	}

	t.Run("other destinations redirected", func(t *testing.T) {
		up4 := netip.AddrPortFrom(node.Gateway, 8080)
		c, err := dial(pod, "tcp4", up4.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkRedirected(t, proxy4, c, up4)
		up6 := netip.AddrPortFrom(node.Gateway6, 8080)
		c6, err := dial(pod, "tcp6", up6.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c6.Close()
		checkRedirected(t, proxy6, c6, up6)
		if st := stats(t, r); st.Redirected != 2 {
			t.Fatalf("stats %+v, want 2 redirected", st)
		}
	})
	t.Run("dns to own address still to the proxy", func(t *testing.T) {
		pc := pod.ListenPacket(t, "udp4", "127.0.0.1:15053")
		done := make(chan struct{})
		go func() { defer close(done); fakeDNS(pc) }()
		t.Cleanup(func() { pc.Close(); <-done })
		server := netip.AddrPortFrom(pod.IP, 53)
		c, err := dial(pod, "udp4", server.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
		if from := readReply(t, c.(*net.UDPConn), "q"); from != server {
			t.Fatalf("reply from %s, want %s", from, server)
		}
		if st := stats(t, r); st.DNSRedirected != 1 {
			t.Fatalf("stats %+v, want 1 DNS redirect", st)
		}
	})
}

// TestOwnAddrsWithoutConfig: the same call with no OwnAddrs is redirected:
// the map, not something else, keeps it in the pod.
func TestOwnAddrsWithoutConfig(t *testing.T) {
	_, pod, r := setup(t, Config{})
	proxy := listen(t, pod, "tcp4", "127.0.0.1:15001")
	app := listen(t, pod, "tcp4", pod.Addr(8080))
	self := netip.AddrPortFrom(pod.IP, 8080)
	c, err := dial(pod, "tcp4", self.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRedirected(t, proxy, c, self)
	noConn(t, app)
	if st := stats(t, r); st.Redirected != 1 {
		t.Fatalf("stats %+v, want 1 redirected", st)
	}
}

// TestOwnAddrsPastTheBound: Attach refuses MaxOwnAddrs+1 addresses and
// leaves nothing attached.
func TestOwnAddrsPastTheBound(t *testing.T) {
	requireBPF(t)
	node := pods.NewNode(t)
	pod := node.AddPod(t, "app", "")
	r, err := Attach(Config{Cgroup: pod.Cgroup, OwnAddrs: append(testAddrs(MaxOwnAddrs), pod.IP)})
	if err == nil {
		r.Close()
		t.Fatal("Attach accepted MaxOwnAddrs+1 own addresses")
	}
	if !strings.Contains(err.Error(), "Config.OwnAddrs has 17 addresses, more than MaxOwnAddrs (16)") {
		t.Fatalf("Attach = %v", err)
	}
	if n := linksOnCgroup(t, cgroupID(t, pod.Cgroup)); n != 0 {
		t.Fatalf("%d links on the cgroup after a refused Attach", n)
	}
}

// attachTo attaches cfg to pod's cgroup until cleanup.
func attachTo(t testing.TB, pod *pods.Pod, cfg Config) *Redirect {
	t.Helper()
	cfg.Cgroup = pod.Cgroup
	r, err := Attach(cfg)
	if err != nil {
		t.Fatalf("Attach: %+v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// dialDualStack connects an AF_INET6 socket (not V6ONLY) from ns to the
// IPv4 address to as ::ffff:a.b.c.d: only connect6 sees it.
func dialDualStack(t testing.TB, ns doer, to netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), "dualstack")
		defer f.Close()
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}); err != nil {
			return err
		}
		c, err = net.FileConn(f)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}
