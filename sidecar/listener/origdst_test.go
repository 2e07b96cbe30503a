package listener_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/weft-mesh/weft/conformance/pods"
	"github.com/weft-mesh/weft/sidecar/listener"
)

// Unprivileged: what needs no namespace.
func TestOrigDstNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, err := listener.OrigDst{}.Destination(a)
	if err == nil || !strings.Contains(err.Error(), "not a TCP connection") {
		t.Fatalf("pipe: %v", err)
	}
	// Fallback only answers for "not redirected", never for other failures.
	if _, err := (listener.OrigDst{Fallback: listener.LocalAddr{}}).Destination(a); err == nil {
		t.Fatal("pipe with fallback: no error")
	}
}

// redirectRules sends TCP to the listed destinations to port 15001 (15002 for
// the dual-stack case), as the interception rules would, in a pod's netns.
const redirectRules4 = `*nat
-A OUTPUT -p tcp -d 10.99.0.1/32 -j REDIRECT --to-ports 15001
-A OUTPUT -p tcp -d 10.99.0.2/32 -j REDIRECT --to-ports 15002
COMMIT
`

const redirectRules6 = `*nat
-A OUTPUT -p tcp -d fd99::1/128 -j REDIRECT --to-ports 15001
COMMIT
`

func restore(t *testing.T, p *pods.Pod, cmd, rules string) {
	t.Helper()
	c := p.Command(cmd, "--noflush")
	c.Stdin = strings.NewReader(rules)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v: %s", cmd, p.NS(), err, out)
	}
}

// listen listens in p with MPTCP as asked (Go's default is on: pitfall 4).
func listen(t *testing.T, p *pods.Pod, network, addr string, mptcp bool) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := p.Do(func() (err error) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(mptcp)
		ln, err = lc.Listen(context.Background(), network, addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// through dials dst from p and returns the connection ln accepted for it.
func through(t *testing.T, p *pods.Pod, ln net.Listener, dst string) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	network := "tcp"
	cc, err := p.Dial(network, dst)
	if err != nil {
		ln.Close() // ends the Accept
		<-ch
		t.Fatalf("dial %s: %v", dst, err)
	}
	t.Cleanup(func() { cc.Close() })
	r := <-ch
	if r.err != nil {
		t.Fatalf("accept for %s: %v", dst, r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// TestOrigDstIptables: real iptables REDIRECT in a pod's netns, IPv4, IPv6
// and IPv4 on a dual-stack (AF_INET6, MPTCP-capable) listener.
func TestOrigDstIptables(t *testing.T) {
	node := pods.NewNode(t)
	a := node.AddPod(t, "a", "shop")
	restore(t, a, "iptables-restore", redirectRules4)
	restore(t, a, "ip6tables-restore", redirectRules6)
	ln4 := listen(t, a, "tcp4", "127.0.0.1:15001", false)
	ln6 := listen(t, a, "tcp6", "[::1]:15001", false)
	dual := listen(t, a, "tcp", "[::]:15002", true)

	for _, tc := range []struct {
		name string
		ln   net.Listener
		dst  string
	}{
		{"ipv4", ln4, "10.99.0.1:80"},
		{"ipv4 other port", ln4, "10.99.0.1:9080"},
		{"ipv6", ln6, "[fd99::1]:443"},
		{"ipv4-mapped on a dual-stack listener", dual, "10.99.0.2:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := through(t, a, tc.ln, tc.dst)
			want := netip.MustParseAddrPort(tc.dst)
			got, err := listener.OrigDst{}.Destination(c)
			if err != nil || got != want {
				t.Fatalf("OrigDst = %v, %v; want %v (local %v)", got, err, want, c.LocalAddr())
			}
			if n := testing.AllocsPerRun(50, func() { _, _ = listener.OrigDst{}.Destination(c) }); n != 0 {
				t.Errorf("OrigDst allocates %v times per connection", n)
			}
		})
	}

	// A connection made to the listener itself: tracked, not translated; the
	// kernel answers the local address (what explicit mode means).
	c := through(t, a, ln4, "127.0.0.1:15001")
	if got, err := (listener.OrigDst{}).Destination(c); err != nil || got != netip.MustParseAddrPort("127.0.0.1:15001") {
		t.Errorf("direct connection in a tracking netns: %v, %v", got, err)
	}

	// A pod with no rules tracks nothing: a clear error, or the fallback.
	b := node.AddPod(t, "b", "shop")
	lnb := listen(t, b, "tcp4", "127.0.0.1:15001", false)
	cb := through(t, b, lnb, "127.0.0.1:15001")
	_, err := listener.OrigDst{}.Destination(cb)
	if !errors.Is(err, listener.ErrNoOriginalDst) || !strings.Contains(err.Error(), "local 127.0.0.1:15001") {
		t.Errorf("untracked: %v, want ErrNoOriginalDst naming the local address", err)
	}
	if got, err := (listener.OrigDst{Fallback: listener.LocalAddr{}}).Destination(cb); err != nil || got != netip.MustParseAddrPort("127.0.0.1:15001") {
		t.Errorf("untracked with fallback: %v, %v", got, err)
	}
}
