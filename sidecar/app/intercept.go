package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/listener"
)

// intercepting says s's traffic is redirected to the sidecar (iptables,
// ebpf, or auto, which ends in one of them): what the listeners' sockets,
// their Destination and the dial to the application depend on, known before
// ebpf/mode has chosen.
func intercepting(s *render.Settings) bool { return s.Node.Interception != node.InterceptionNone }

// listenIntercept binds ap for an intercept-mode listener: a socket of ap's
// own family (tcp4 or tcp6, never Go's dual-stack wildcard: SO_ORIGINAL_DST's
// level must match the family) with MPTCP off (a redirected connection must be
// plain TCP for eBPF's socket maps, and Go enables MPTCP by default), plus
// ap's IPv6 twin ([::1] beside 127.0.0.1, [::] beside 0.0.0.0) when the pod
// has IPv6; a twin the pod cannot have (no IPv6, no ::1) is skipped with a log
// line, any other failure fails the start.
func listenIntercept(ctx context.Context, name string, ap netip.AddrPort, log hclog.Logger) ([]net.Listener, error) {
	ln, err := listenFamily(ctx, ap)
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{ln}
	var twin netip.Addr
	switch a := ap.Addr(); {
	case a == netip.AddrFrom4([4]byte{127, 0, 0, 1}):
		twin = netip.IPv6Loopback()
	case a == netip.IPv4Unspecified():
		twin = netip.IPv6Unspecified()
	default:
		return lns, nil
	}
	t := netip.AddrPortFrom(twin, ap.Port())
	ln6, err := listenFamily(ctx, t)
	switch {
	case err == nil:
		lns = append(lns, ln6)
	case errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT):
		log.Info("no IPv6 listener: the pod has no IPv6", "listener", name, "address", t, "error", err)
	default:
		ln.Close()
		return nil, err
	}
	return lns, nil
}

func listenFamily(ctx context.Context, ap netip.AddrPort) (net.Listener, error) {
	network := "tcp4"
	if ap.Addr().Is6() {
		network = "tcp6"
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return lc.Listen(ctx, network, ap.String())
}

// ownAddrs are the addresses of every bound listener (the loop guard's
// "self") and the pod's own addresses.
func ownAddrs(lns map[string][]net.Listener, more ...net.Listener) ([]netip.AddrPort, []netip.Addr) {
	var listen []netip.AddrPort
	add := func(ln net.Listener) {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			listen = append(listen, a.AddrPort())
		}
	}
	for _, l := range lns {
		for _, ln := range l {
			add(ln)
		}
	}
	for _, ln := range more {
		add(ln)
	}
	local, _ := interfaceAddrs()
	return listen, local
}

// interfaceAddrs are the addresses of this network namespace's interfaces:
// the pod's own, loopback included.
func interfaceAddrs() ([]netip.Addr, error) {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	var local []netip.Addr
	for _, ia := range ifs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			local = append(local, p.Addr())
		}
	}
	return local, nil
}

// podAddrs are the pod's own addresses but loopback (which the eBPF programs
// never redirect anyway): TCP to them stays in the pod, as with iptables.
func podAddrs() ([]netip.Addr, error) {
	all, err := interfaceAddrs()
	if err != nil {
		return nil, err
	}
	var own []netip.Addr
	for _, a := range all {
		if !a.IsLoopback() {
			own = append(own, a)
		}
	}
	return own, nil
}

// upstreamDial is how the sidecar dials upstreams. Intercepting, its
// connections to the application (loopback) come from 127.0.0.6 (::6 for
// ::1), which the interception rules return untouched; a source that cannot
// be bound here is not used (the kernel picks, as in explicit mode), which
// is logged once.
func upstreamDial(intercepting bool, log hclog.Logger) cluster.DialFunc {
	if !intercepting {
		return nil
	}
	d := &cluster.SourceDialer{V4: cluster.InboundPassthroughSource, V6: cluster.InboundPassthroughSource6}
	for _, src := range []*netip.Addr{&d.V4, &d.V6} {
		if err := cluster.CheckSource(*src); err != nil {
			lvl := hclog.Warn
			if src.Is6() {
				lvl = hclog.Info // ::6 exists only where IPv6 interception added it
			}
			log.Log(lvl, "connections to the application keep the kernel's source: the inbound passthrough source cannot be bound", "source", *src, "error", err)
			*src = netip.Addr{}
		}
	}
	return d.Dial
}

// destination is how listeners learn a connection's original destination:
// SO_ORIGINAL_DST when intercepting (a connection nothing redirected or
// tracked, made to the listener itself, keeps its local address), the local
// address in explicit mode.
func destination(intercepting bool) listener.Destination {
	if intercepting {
		return listener.OrigDst{Fallback: listener.LocalAddr{}}
	}
	return listener.LocalAddr{}
}
