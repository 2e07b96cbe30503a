//go:build linux

package redirect

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// TestRedirectMPTCPClient: an MPTCP client (Go's Dialer.SetMultipathTCP) is
// redirected like a TCP one; the kernel runs the hooks on its first subflow.
func TestRedirectMPTCPClient(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/net/mptcp/enabled"); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Skipf("MPTCP is not enabled here (%v)", err)
	}
	node, n, _ := setup(t, Config{})
	proxy := listen(t, n, "tcp4", "127.0.0.1:15001")
	want := netip.AddrPortFrom(node.Gateway, 8080)
	up := listen(t, node, "tcp4", want.String())
	d := &net.Dialer{Timeout: ioTimeout}
	d.SetMultipathTCP(true)
	c, err := dial(n, "tcp4", want.String(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRedirected(t, proxy, c, want)
	noConn(t, up)
}
