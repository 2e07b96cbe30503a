package app

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/weft-mesh/weft/sidecar/listener"
	"github.com/weft-mesh/weft/tools/testkit"
)

// sockopt reads an int socket option of ln's socket.
func sockopt(t *testing.T, ln net.Listener, level, opt int) int {
	t.Helper()
	rc, err := ln.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

// TestListenIntercept: one socket per family, MPTCP off, the IPv6 twin
// v6-only beside the IPv4 one; a specific address gets no twin.
func TestListenIntercept(t *testing.T) {
	log := hclog.NewNullLogger()
	for _, tc := range []struct {
		addr string
		twin string // "" none
	}{
		{"127.0.0.1:0", "::1"},
		{"0.0.0.0:0", "::"},
		{"127.77.9.8:0", ""},
	} {
		lns, err := listenIntercept(context.Background(), "outbound", netip.MustParseAddrPort(tc.addr), log)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		defer func() {
			for _, ln := range lns {
				ln.Close()
			}
		}()
		switch {
		case tc.twin != "" && len(lns) == 1:
			t.Logf("%s: no IPv6 twin here (no IPv6)", tc.addr)
		case tc.twin == "" && len(lns) != 1, tc.twin != "" && len(lns) != 2:
			t.Fatalf("%s: %d listeners", tc.addr, len(lns))
		}
		for i, ln := range lns {
			if p := sockopt(t, ln, unix.SOL_SOCKET, unix.SO_PROTOCOL); p != unix.IPPROTO_TCP {
				t.Errorf("%s: listener %d protocol %d, want TCP (MPTCP off)", tc.addr, i, p)
			}
			a := ln.Addr().(*net.TCPAddr).AddrPort().Addr()
			want := netip.MustParseAddrPort(tc.addr).Addr()
			if i == 1 {
				want = netip.MustParseAddr(tc.twin)
				if sockopt(t, ln, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY) != 1 {
					t.Errorf("%s: the IPv6 twin is dual-stack", tc.addr)
				}
			} else if sockopt(t, ln, unix.SOL_SOCKET, unix.SO_DOMAIN) != unix.AF_INET {
				t.Errorf("%s: not an AF_INET socket", tc.addr)
			}
			if a != want {
				t.Errorf("%s: listener %d on %s, want %s", tc.addr, i, a, want)
			}
		}
	}
	// A twin port in use is a start failure, not a skipped twin.
	busy, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	if lns, err := listenIntercept(context.Background(), "outbound", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), log); err == nil {
		for _, ln := range lns {
			ln.Close()
		}
		t.Error("twin port in use: no error")
	}
}

// TestRunIptablesMode: --intercept=iptables in process (no netns: a
// connection nothing redirected keeps its local address): the mode in
// config_dump and /metrics, the loop guard's metric, and the outbound
// listener serving an explicit request (no configuration: 503).
func TestRunIptablesMode(t *testing.T) {
	s := settings(t, "127.77.9.9", "--intercept", "iptables", "--inbound-addr", "127.77.9.9:15006", "--dns-addr", "off")
	if !intercepting(s) || s.Node.Interception != "iptables" {
		t.Fatalf("settings: %+v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, Options{Logger: hclog.NewNullLogger(), TickInterval: 50 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (string, error) {
		resp, err := hc.Get("http://" + s.AdminAddr.String() + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	var dump struct {
		Interception struct{ Mode, Reason string } `json:"interception"`
	}
	testkit.Wait(t, 10*time.Second, func() error {
		b, err := get("/config_dump")
		if err != nil {
			return err
		}
		return json.Unmarshal([]byte(b), &dump)
	})
	if dump.Interception.Mode != "iptables" || dump.Interception.Reason == "" {
		t.Errorf("config_dump interception = %+v", dump.Interception)
	}
	m, err := get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`weft_interception_mode{mode="iptables"} 1`, `weft_interception_mode{mode="none"} 0`, `weft_passthrough_total{result="loop"} 0`} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.OutboundAddr.String()+"/", nil)
	req.Host = "reviews:9080"
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("explicit request, no configuration: %d, want 503", resp.StatusCode)
	}
}

// TestDestinationPerMode: explicit mode reads the local address, the
// intercept modes SO_ORIGINAL_DST with the local address as fallback, and
// dial the application from the inbound passthrough source.
func TestDestinationPerMode(t *testing.T) {
	for _, tc := range []struct {
		flag string
		icpt bool
	}{{"none", false}, {"iptables", true}, {"ebpf", true}, {"auto", true}} {
		s := settings(t, "127.77.9.10", "--intercept", tc.flag)
		if intercepting(s) != tc.icpt {
			t.Errorf("%s: intercepting = %v", tc.flag, !tc.icpt)
		}
		d := destination(intercepting(s))
		if od, ok := d.(listener.OrigDst); tc.icpt && (!ok || od.Fallback == nil) {
			t.Errorf("%s: Destination %T %+v, want OrigDst with a fallback", tc.flag, d, d)
		}
		if _, ok := d.(listener.LocalAddr); !tc.icpt && !ok {
			t.Errorf("%s: Destination %T, want LocalAddr", tc.flag, d)
		}
		if got := upstreamDial(intercepting(s), hclog.NewNullLogger()) != nil; got != tc.icpt {
			t.Errorf("%s: source-binding dialer %v, want %v", tc.flag, got, tc.icpt)
		}
	}
}
