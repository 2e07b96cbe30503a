package intercept

// Privileged tests: the rules installed in pods of conformance/pods (network
// namespaces on a node's bridge), with real connections: the node's gateway
// (10.250.0.1, fd00:250::1) plays the rest of the world and the resolver. They skip
// (with the reason) when not root, without netns support or without both iptables
// backends; WEFT_REQUIRE_PRIVILEGED=1 turns the skips into failures.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/conformance/pods"
)

// doer is a pod or the node: code run inside its network namespace.
type doer interface{ Do(fn func() error) error }

// newPod makes a node and a pod on it, after checking the iptables tools (NewNode
// checks the rest).
func newPod(t *testing.T) (*pods.Node, *pods.Pod) {
	t.Helper()
	for _, name := range []string{"iptables-nft-restore", "iptables-legacy-restore", "ip6tables-nft-restore", "ip6tables-legacy-restore"} {
		if _, err := lookTool(name); err != nil {
			if os.Getenv(pods.RequireEnv) == "1" {
				t.Fatalf("%s=1 and %v", pods.RequireEnv, err)
			}
			t.Skip(err)
		}
	}
	n := pods.NewNode(t)
	return n, n.AddPod(t, "app", "")
}

func mustDo(t *testing.T, d doer, fn func() error) {
	t.Helper()
	if err := d.Do(fn); err != nil {
		t.Fatal(err)
	}
}

func saveIn(t *testing.T, d doer, b Backend, v6 bool) string {
	t.Helper()
	var s string
	mustDo(t, d, func() (err error) {
		s, err = save(context.Background(), b, v6)
		return err
	})
	return normalizeSave(s)
}

// normalizeSave drops comments and counters, which change between two saves.
func normalizeSave(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, ":") {
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i]
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// dropEmptyTables drops the tables of a normalized save that hold no rule and no
// user chain: iptables-save shows a table once something loaded it (our raw table),
// and removing our chains does not unload it.
func dropEmptyTables(s string) string {
	var out, block []string
	empty := true
	for _, line := range strings.Split(s, "\n") {
		block = append(block, line)
		switch {
		case strings.HasPrefix(line, "*"):
			block, empty = []string{line}, true
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, ":") && strings.HasSuffix(line, " -"):
			empty = false
		case line == "COMMIT":
			if !empty {
				out = append(out, block...)
			}
			block = nil
		}
	}
	return strings.Join(out, "\n")
}

// ruleLines are the "-A" lines of an iptables-restore text, by table.
func ruleLines(s string) map[string][]string {
	m := map[string][]string{}
	table := ""
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			m[table] = append(m[table], line)
		}
	}
	return m
}

// ours are the saved "-A" lines that belong to us: in our chains or jumping to them.
func ours(saved string) map[string][]string {
	m := map[string][]string{}
	for table, rules := range ruleLines(saved) {
		for _, r := range rules {
			chain, target := ruleChainTarget(r)
			if isOwnChain(table, chain) || isOwnChain(table, target) {
				m[table] = append(m[table], r)
			}
		}
	}
	return m
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
		if count[x] < 0 {
			return false
		}
	}
	return true
}

var backends = []Backend{BackendNFT, BackendLegacy}

func TestApplyIdempotentAndRemove(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			_, p := newPod(t)
			// Someone else's rules and chain, which we must leave alone.
			foreign := "*nat\n:OTHER - [0:0]\n-A OTHER -p tcp -j RETURN\n-A OUTPUT -p tcp -j OTHER\nCOMMIT\n"
			mustDo(t, p, func() error { return restore(context.Background(), b, false, foreign) })
			mustDo(t, p, func() error { return restore(context.Background(), b, true, foreign) })
			foreignV4, foreignV6 := saveIn(t, p, b, false), saveIn(t, p, b, true)

			cfg := DefaultConfig()
			cfg.Backend, cfg.IPv6 = b, IPv6On
			cfg.ExcludeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/64")}
			apply := func() {
				t.Helper()
				mustDo(t, p, func() error { return Apply(context.Background(), cfg) })
			}
			apply()
			first := [2]string{saveIn(t, p, b, false), saveIn(t, p, b, true)}
			apply()
			second := [2]string{saveIn(t, p, b, false), saveIn(t, p, b, true)}
			for i, fam := range []string{"IPv4", "IPv6"} {
				if first[i] != second[i] {
					t.Errorf("%s: a second Apply changed the rules:\nfirst:\n%s\nsecond:\n%s", fam, first[i], second[i])
				}
				// What the kernel holds of ours is exactly Rules(), line for line.
				got, want := ours(second[i]), ruleLines(Rules(cfg, i == 1))
				for _, table := range []string{"nat", "raw"} {
					if !sameSet(got[table], want[table]) {
						t.Errorf("%s %s: installed\n%s\nwant\n%s", fam, table, strings.Join(got[table], "\n"), strings.Join(want[table], "\n"))
					}
				}
				if !strings.Contains(second[i], "-A OUTPUT -p tcp -j OTHER") || !strings.Contains(second[i], "-A OTHER -p tcp -j RETURN") {
					t.Errorf("%s: the foreign rules are gone:\n%s", fam, second[i])
				}
			}

			// A changed config (DNS off) replaces ours: the raw chains and the nat
			// WEFT_DNS chain go away.
			cfg.DNS = false
			apply()
			for i, fam := range []string{"IPv4", "IPv6"} {
				s := saveIn(t, p, b, i == 1)
				if strings.Contains(s, "WEFT_DNS") || strings.Contains(s, "CT --zone") {
					t.Errorf("%s: DNS rules left after --dns=false:\n%s", fam, s)
				}
				if !sameSet(ours(s)["nat"], ruleLines(Rules(cfg, i == 1))["nat"]) {
					t.Errorf("%s: after the change:\n%s", fam, s)
				}
			}

			// Remove: exactly ours gone, the rest as it was; twice is fine.
			for range 2 {
				mustDo(t, p, func() error { return Remove(context.Background(), cfg) })
			}
			for i, want := range []string{foreignV4, foreignV6} {
				got := saveIn(t, p, b, i == 1)
				if strings.Contains(got, "WEFT_") {
					t.Errorf("WEFT_ left after Remove:\n%s", got)
				}
				if got, want := dropEmptyTables(got), dropEmptyTables(want); got != want {
					t.Errorf("after Remove:\n%s\nwant (before Apply):\n%s", got, want)
				}
			}
		})
	}
}

// TestBackendAuto: auto picks the backend already holding rules, else nft, and
// Remove with auto cleans whichever holds ours.
func TestBackendAuto(t *testing.T) {
	_, p := newPod(t)
	cfg := DefaultConfig()
	var res Result
	mustDo(t, p, func() (err error) { res, err = ApplyResult(context.Background(), cfg); return err })
	if res.Backend != BackendNFT {
		t.Errorf("fresh netns: backend %s (%s), want nft", res.Backend, res.BackendReason)
	}
	mustDo(t, p, func() error { return Remove(context.Background(), cfg) })

	_, q := newPod(t)
	mustDo(t, q, func() error {
		return restore(context.Background(), BackendLegacy, false, "*filter\n-A INPUT -p tcp --dport 9 -j DROP\nCOMMIT\n")
	})
	mustDo(t, q, func() (err error) { res, err = ApplyResult(context.Background(), cfg); return err })
	if res.Backend != BackendLegacy {
		t.Errorf("netns with legacy rules: backend %s (%s), want legacy", res.Backend, res.BackendReason)
	}
	if s := saveIn(t, q, BackendNFT, false); strings.Contains(s, "WEFT_") {
		t.Errorf("auto wrote to nft too:\n%s", s)
	}
	mustDo(t, q, func() (err error) { res, err = RemoveResult(context.Background(), cfg); return err })
	if s := saveIn(t, q, BackendLegacy, false); strings.Contains(s, "WEFT_") || !strings.Contains(s, "--dport 9 -j DROP") {
		t.Errorf("auto Remove left:\n%s", s)
	}
}

// helperEnv selects a helper mode in TestMain (see runHelper).
const helperEnv = "WEFT_INTERCEPT_HELPER"

// startHelper starts the test binary bin in pod p as uid/gid, in mode with arg, and
// returns its stdout lines. It is killed and reaped at cleanup.
func startHelper(t *testing.T, bin string, p *pods.Pod, uid, gid int, mode, arg string) *bufio.Scanner {
	t.Helper()
	cmd := p.As(pods.User{UID: uid, GID: gid}).Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "WEFT_HELPER_ARG="+arg)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return bufio.NewScanner(stdout)
}

func readLine(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("helper ended: %v", sc.Err())
	}
	return sc.Text()
}

// runHelper is the child side: it reports on stdout and exits.
//   - tcp [SRC,]ADDR: connect (from SRC), print "local=A remote=B", send "ping", print the answer.
//   - udpecho ADDR: listen, print "ready", answer each datagram with "echo:"+data.
//   - udpquery ADDR: connected UDP socket, send "q", print "from=B data=D".
//   - intercept ARGS: Main(ARGS split on spaces), its exit status.
func runHelper(mode, arg string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	switch mode {
	case "tcp":
		d := net.Dialer{Timeout: 5 * time.Second}
		if src, dst, ok := strings.Cut(arg, ","); ok { // "SRC,DST": bind the source address
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
			arg = dst
		}
		c, err := d.Dial("tcp", arg)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		fmt.Printf("local=%s remote=%s\n", c.LocalAddr(), c.RemoteAddr())
		if _, err := c.Write([]byte("ping")); err != nil {
			return fail(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil {
			return fail(err)
		}
		fmt.Printf("answer=%s\n", b[:n])
	case "udpecho":
		pc, err := net.ListenPacket("udp", arg)
		if err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		b := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return fail(err)
			}
			if _, err := pc.WriteTo(append([]byte("echo:"), b[:n]...), from); err != nil {
				return fail(err)
			}
		}
	case "udpquery":
		c, err := net.Dial("udp", arg)
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("q")); err != nil {
			return fail(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 512)
		n, err := c.Read(b)
		if err != nil {
			return fail(err)
		}
		fmt.Printf("from=%s data=%s\n", c.RemoteAddr(), b[:n])
	case "intercept": // `sidecar intercept ARG...` (ARG split on spaces)
		return Main(strings.Fields(arg), os.Stdout, os.Stderr)
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}
	return 0
}

// origDst reads SO_ORIGINAL_DST (SOL_IP 80, or SOL_IPV6 80 = IP6T_SO_ORIGINAL_DST) as
// Envoy does: by the socket's family.
func origDst(c net.Conn) (netip.AddrPort, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		var buf [28]byte // sockaddr_in6; sockaddr_in is 16
		size := uint32(len(buf))
		level := unix.SOL_IP
		if la := c.LocalAddr().(*net.TCPAddr); la.IP.To4() == nil {
			level = unix.SOL_IPV6
		}
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), 80, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if e != 0 {
			serr = e
			return
		}
		port := binary.BigEndian.Uint16(buf[2:4])
		switch binary.LittleEndian.Uint16(buf[0:2]) {
		case unix.AF_INET:
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[4:8])), port)
		case unix.AF_INET6:
			ap = netip.AddrPortFrom(netip.AddrFrom16([16]byte(buf[8:24])), port)
		default:
			serr = fmt.Errorf("family %d", binary.LittleEndian.Uint16(buf[0:2]))
		}
	})
	if err != nil {
		return ap, err
	}
	return ap, serr
}

// listenIn opens a TCP listener in ns (MPTCP off, as the sidecar's in intercept mode);
// each accepted connection is answered with name and sent on the returned channel.
func listenIn(t *testing.T, d doer, network, addr, name string) <-chan net.Conn {
	t.Helper()
	var ln net.Listener
	mustDo(t, d, func() (err error) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		ln, err = lc.Listen(context.Background(), network, addr)
		return err
	})
	conns := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err == nil {
				_, _ = c.Write([]byte(name))
				_ = c.(*net.TCPConn).CloseWrite() // the dialer reads to EOF
			}
			conns <- c // the channel holds 16: more would be a test bug
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return conns
}

// dialFrom connects from ns in-process (uid 0: not the proxy), sends "ping" and
// returns the answer and the local address.
func dialFrom(t *testing.T, d doer, addr netip.AddrPort) (answer string, local netip.AddrPort) {
	t.Helper()
	var c net.Conn
	mustDo(t, d, func() (err error) {
		c, err = net.DialTimeout("tcp", addr.String(), 5*time.Second)
		return err
	})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(c, 64))
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	return string(b), c.LocalAddr().(*net.TCPAddr).AddrPort()
}

func accepted(t *testing.T, conns <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no connection within 5s", what)
		return nil
	}
}

// TestRedirect: with the rules in a pod netns (each backend, IPv4 and IPv6), outbound
// TCP from the app goes to 15001 with SO_ORIGINAL_DST the address it dialled, the
// proxy's uid and gid go out direct, inbound TCP to the pod goes to 15006 except the
// excluded and sidecar ports, and DNS to port 53 goes to 15053 (not the proxy's).
func TestRedirect(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			node, p := newPod(t)
			bin := node.TestBinary(t)
			cfg := DefaultConfig()
			cfg.Backend, cfg.IPv6 = b, IPv6On
			cfg.ExcludeInboundPorts = []PortRange{{9090, 9090}}
			mustDo(t, p, func() error { return Apply(context.Background(), cfg) })

			for _, fam := range []struct {
				name                 string
				network, lo, any     string
				pod, peer            netip.Addr
				outboundAt, dnsReply string
				passthrough          string
			}{
				{"ipv4", "tcp4", "127.0.0.1", "0.0.0.0", p.IP, node.Gateway, "127.0.0.1:15001", "127.0.0.1:15053", InboundPassthroughV4},
				{"ipv6", "tcp6", "::1", "::", p.IP6, node.Gateway6, "[::1]:15001", "[::1]:15053", InboundPassthroughV6},
			} {
				t.Run(fam.name, func(t *testing.T) {
					lp := func(a string, port int) string { return net.JoinHostPort(a, strconv.Itoa(port)) }
					outbound := listenIn(t, p, fam.network, fam.outboundAt, "outbound")
					inbound := listenIn(t, p, fam.network, lp(fam.any, 15006), "inbound")
					excluded := listenIn(t, p, fam.network, lp(fam.any, 9090), "app9090")
					ready := listenIn(t, p, fam.network, lp(fam.any, 15021), "ready")
					peer := listenIn(t, node, fam.network, lp(fam.peer.String(), 80), "peer")
					target := netip.AddrPortFrom(fam.peer, 80)

					// Outbound from the app (uid 0): to 15001, original destination kept.
					ans, local := dialFrom(t, p, target)
					if ans != "outbound" {
						t.Fatalf("app -> %s answered by %q, want the outbound listener", target, ans)
					}
					c := accepted(t, outbound, "outbound")
					if got, err := origDst(c); err != nil || got != target {
						t.Errorf("SO_ORIGINAL_DST = %v, %v; want %v", got, err, target)
					}
					if c.RemoteAddr().(*net.TCPAddr).AddrPort() != local {
						t.Errorf("outbound listener saw %v, the app dialled from %v", c.RemoteAddr(), local)
					}

					// The proxy (uid 1337) and anything with gid 1337: direct to the peer.
					for _, id := range []struct{ uid, gid int }{{DefaultProxyUID, DefaultProxyGID}, {4242, DefaultProxyGID}, {DefaultProxyUID, 4242}} {
						sc := startHelper(t, bin, p, id.uid, id.gid, "tcp", target.String())
						readLine(t, sc) // local=... remote=...
						if got := readLine(t, sc); got != "answer=peer" {
							t.Errorf("uid %d gid %d -> %s: %q, want the peer directly", id.uid, id.gid, target, got)
						}
						accepted(t, peer, "peer")
					}
					// And a process with neither is captured like the test process.
					sc := startHelper(t, bin, p, 4242, 4242, "tcp", target.String())
					readLine(t, sc)
					if got := readLine(t, sc); got != "answer=outbound" {
						t.Errorf("uid 4242 gid 4242: %q, want the outbound listener", got)
					}
					accepted(t, outbound, "outbound (uid 4242)")

					// Inbound from the peer to the pod: to 15006, original destination kept;
					// -d 9090 and the sidecar's 15021 reach their listeners directly.
					dst := netip.AddrPortFrom(fam.pod, 8080)
					if ans, _ := dialFrom(t, node, dst); ans != "inbound" {
						t.Fatalf("peer -> %s answered by %q, want the inbound listener", dst, ans)
					}
					c = accepted(t, inbound, "inbound")
					if got, err := origDst(c); err != nil || got != dst {
						t.Errorf("inbound SO_ORIGINAL_DST = %v, %v; want %v", got, err, dst)
					}
					for _, tc := range []struct {
						port int
						want string
						ch   <-chan net.Conn
					}{{9090, "app9090", excluded}, {15021, "ready", ready}} {
						dst := netip.AddrPortFrom(fam.pod, uint16(tc.port))
						if ans, _ := dialFrom(t, node, dst); ans != tc.want {
							t.Errorf("peer -> %s answered by %q, want %q (not captured)", dst, ans, tc.want)
						}
						c := accepted(t, tc.ch, tc.want)
						if got := c.LocalAddr().(*net.TCPAddr).AddrPort(); got != dst {
							t.Errorf("uncaptured %s arrived at %v", dst, got)
						}
					}

					// Calls to the pod's own address over lo (app 8080 listens there):
					// the proxy's own (uid 1337) go through inbound capture, as Istio's
					// "app calls its own Service"; the proxy's from the inbound
					// passthrough source (127.0.0.6, ::6) reach the app; the app's own
					// reach the app.
					app := listenIn(t, p, fam.network, lp(fam.any, 8080), "app8080")
					self := netip.AddrPortFrom(fam.pod, 8080)
					sc = startHelper(t, bin, p, DefaultProxyUID, DefaultProxyGID, "tcp", self.String())
					readLine(t, sc)
					if got := readLine(t, sc); got != "answer=inbound" {
						t.Errorf("proxy -> own pod %s: %q, want the inbound listener", self, got)
					}
					if got, err := origDst(accepted(t, inbound, "inbound (self call)")); err != nil || got != self {
						t.Errorf("self call SO_ORIGINAL_DST = %v, %v; want %v", got, err, self)
					}
					sc = startHelper(t, bin, p, DefaultProxyUID, DefaultProxyGID, "tcp", fam.passthrough+","+self.String())
					readLine(t, sc)
					if got := readLine(t, sc); got != "answer=app8080" {
						t.Errorf("proxy from %s -> %s: %q, want the app directly", fam.passthrough, self, got)
					}
					accepted(t, app, "app (passthrough)")
					if ans, _ := dialFrom(t, p, self); ans != "app8080" {
						t.Errorf("app -> own pod %s: %q, want the app directly", self, ans)
					}
					accepted(t, app, "app (own call)")

					// DNS: the app's UDP to port 53 reaches the proxy's 15053 (uid 1337) and
					// its answer comes back from the address queried; the proxy's own query
					// goes to the resolver.
					echo := startHelper(t, bin, p, DefaultProxyUID, DefaultProxyGID, "udpecho", fam.dnsReply)
					if got := readLine(t, echo); got != "ready" {
						t.Fatalf("udpecho: %q", got)
					}
					listenUDPEcho(t, node, lp(fam.peer.String(), 53), "resolver:")
					dns := netip.AddrPortFrom(fam.peer, 53)
					// The query socket is connected: an answer not translated back to
					// the address queried would be dropped and the helper would fail.
					q := startHelper(t, bin, p, 4242, 4242, "udpquery", dns.String())
					if got, want := readLine(t, q), fmt.Sprintf("from=%s data=echo:q", dns); got != want {
						t.Errorf("app UDP DNS query: %q, want %q (answered by the proxy on 15053)", got, want)
					}
					q = startHelper(t, bin, p, DefaultProxyUID, DefaultProxyGID, "udpquery", dns.String())
					if got, want := readLine(t, q), fmt.Sprintf("from=%s data=resolver:q", dns); got != want {
						t.Errorf("proxy UDP DNS query: %q, want %q (the resolver itself)", got, want)
					}
					// TCP 53 from the app too.
					dnsTCP := listenIn(t, p, fam.network, fam.dnsReply, "dns-tcp")
					if ans, _ := dialFrom(t, p, dns); ans != "dns-tcp" {
						t.Errorf("app TCP DNS: answered by %q, want the proxy's 15053", ans)
					}
					accepted(t, dnsTCP, "dns tcp")
				})
			}

			// Remove returns the pod to direct traffic.
			mustDo(t, p, func() error { return Remove(context.Background(), cfg) })
			peer := listenIn(t, node, "tcp4", netip.AddrPortFrom(node.Gateway, 81).String(), "peer81")
			if ans, _ := dialFrom(t, p, netip.AddrPortFrom(node.Gateway, 81)); ans != "peer81" {
				t.Errorf("after Remove: answered by %q, want the peer directly", ans)
			}
			accepted(t, peer, "peer after Remove")
		})
	}
}

// listenUDPEcho answers each datagram with prefix+data, in ns, until cleanup.
func listenUDPEcho(t *testing.T, d doer, addr, prefix string) {
	t.Helper()
	var pc net.PacketConn
	mustDo(t, d, func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(prefix), b[:n]...), from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
}

// TestEBPFModeInboundOnly: --mode ebpf captures inbound and leaves outbound alone.
func TestEBPFModeInboundOnly(t *testing.T) {
	node, p := newPod(t)
	cfg := DefaultConfig()
	cfg.Mode, cfg.IPv6 = ModeEBPF, IPv6Off
	mustDo(t, p, func() error { return Apply(context.Background(), cfg) })
	inbound := listenIn(t, p, "tcp4", "0.0.0.0:15006", "inbound")
	gw := netip.AddrPortFrom(node.Gateway, 80)
	peer := listenIn(t, node, "tcp4", gw.String(), "peer")
	if ans, _ := dialFrom(t, node, netip.AddrPortFrom(p.IP, 8080)); ans != "inbound" {
		t.Errorf("inbound in ebpf mode answered by %q", ans)
	}
	accepted(t, inbound, "inbound")
	if ans, _ := dialFrom(t, p, gw); ans != "peer" {
		t.Errorf("outbound in ebpf mode answered by %q, want the peer (not captured)", ans)
	}
	accepted(t, peer, "peer")
	if s := saveIn(t, p, BackendNFT, false); strings.Contains(s, "WEFT_REDIRECT") || strings.Contains(s, "WEFT_DNS") {
		t.Errorf("outbound or DNS chains in ebpf mode:\n%s", s)
	}
}

// TestMainApplyRemove: the command itself (what `sidecar intercept` runs) in a pod:
// a dry run changes nothing, then it installs, says what it chose, removes.
func TestMainApplyRemove(t *testing.T) {
	_, p := newPod(t)
	var out, errb strings.Builder
	rc := -1
	mustDo(t, p, func() error { rc = Main([]string{"--dry-run"}, &out, &errb); return nil })
	if rc != 0 || !strings.Contains(out.String(), "*nat\n") {
		t.Fatalf("dry run: rc %d, %q %q", rc, out.String(), errb.String())
	}
	out.Reset()
	for _, b := range backends {
		for _, v6 := range []bool{false, true} {
			if s := saveIn(t, p, b, v6); strings.Contains(s, "WEFT_") {
				t.Errorf("a dry run installed rules (%s):\n%s", b, s)
			}
		}
	}
	mustDo(t, p, func() error { rc = Main([]string{"-d", "9901", "-x", "10.96.0.0/12"}, &out, &errb); return nil })
	if rc != 0 || !strings.Contains(errb.String(), "installed") || !strings.Contains(errb.String(), "backend nft, IPv4+IPv6") {
		t.Fatalf("apply: rc %d, %q", rc, errb.String())
	}
	if s := saveIn(t, p, BackendNFT, true); !strings.Contains(s, "-A WEFT_INBOUND -p tcp -m tcp --dport 9901 -j RETURN") {
		t.Errorf("IPv6 rules lack -d 9901:\n%s", s)
	}
	errb.Reset()
	mustDo(t, p, func() error { rc = Main([]string{"--remove"}, &out, &errb); return nil })
	if rc != 0 || !strings.Contains(errb.String(), "removed") {
		t.Fatalf("remove: rc %d, %q", rc, errb.String())
	}
	for _, v6 := range []bool{false, true} {
		if s := saveIn(t, p, BackendNFT, v6); strings.Contains(s, "WEFT_") {
			t.Errorf("left after --remove:\n%s", s)
		}
	}
	if out.Len() != 0 {
		t.Errorf("stdout: %q (only --dry-run and --help print there)", out.String())
	}
}

// TestIPv6Auto: --ipv6 auto follows the pod's netns (thread), not the process's.
func TestIPv6Auto(t *testing.T) {
	_, p := newPod(t)
	var before, after bool
	mustDo(t, p, func() error {
		before = wantIPv6(IPv6Auto)
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644); err != nil {
			return err
		}
		after = wantIPv6(IPv6Auto)
		return nil
	})
	if !before || after {
		t.Errorf("auto: %v with IPv6 in the pod, %v with it disabled; want true, false", before, after)
	}
}

// TestCapabilities: the init container's capabilities (NET_ADMIN and NET_RAW only,
// as root: what the injector grants) suffice for both backends, IPv4 and IPv6, apply
// and remove; without NET_ADMIN it fails (so the bound really held).
func TestCapabilities(t *testing.T) {
	node, p := newPod(t)
	setpriv, err := lookTool("setpriv")
	if err != nil {
		t.Skip(err)
	}
	bin := node.TestBinary(t)
	run := func(caps, args string) (int, string) {
		cmd := p.Command(setpriv, "--bounding-set", "-all"+caps, "--inh-caps", "-all", "--", bin)
		cmd.Env = append(os.Environ(), helperEnv+"=intercept", "WEFT_HELPER_ARG="+args)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	for _, b := range backends {
		if rc, out := run(",+net_admin,+net_raw", "--ipv6=true --backend "+string(b)); rc != 0 {
			t.Fatalf("%s with NET_ADMIN, NET_RAW: exit %d: %s", b, rc, out)
		}
		for _, v6 := range []bool{false, true} {
			if s := saveIn(t, p, b, v6); !strings.Contains(s, "-A WEFT_REDIRECT") {
				t.Errorf("%s: no rules installed:\n%s", b, s)
			}
		}
		if rc, out := run(",+net_admin,+net_raw", "--remove --backend "+string(b)); rc != 0 {
			t.Fatalf("%s --remove with NET_ADMIN, NET_RAW: exit %d: %s", b, rc, out)
		}
		if s := saveIn(t, p, b, false); strings.Contains(s, "WEFT_") {
			t.Errorf("%s: left after --remove:\n%s", b, s)
		}
	}
	if rc, out := run(",+net_raw", "--ipv6=false --backend nft"); rc != 1 || !strings.Contains(out, "ermission denied") && !strings.Contains(out, "not permitted") {
		t.Errorf("without NET_ADMIN: exit %d, want 1 (a permission error): %s", rc, out)
	}
}
