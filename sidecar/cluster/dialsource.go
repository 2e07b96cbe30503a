package cluster

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// InboundPassthroughSource and InboundPassthroughSource6 are the source
// addresses of an intercepting sidecar's connections to its own application
// (Istio's InboundPassthroughBindIpv4/Ipv6; `sidecar intercept` adds ::6/128
// to lo): the interception rules return traffic from them on loopback
// untouched, so the sidecar's connection to the app is neither captured by
// inbound again nor by outbound.
var (
	InboundPassthroughSource  = netip.AddrFrom4([4]byte{127, 0, 0, 6})
	InboundPassthroughSource6 = netip.AddrFrom16([16]byte{15: 6})
)

// SourceDialer dials connections to loopback destinations (the application,
// for the inbound listener's clusters) from V4 (IPv4 loopback) or V6 (::1),
// everything else as a plain net.Dialer. A zero source is not used. A bind
// the source cannot take (EADDRNOTAVAIL) falls back to the kernel's choice,
// so a missing address degrades to working traffic, not to failing dials.
type SourceDialer struct {
	V4, V6 netip.Addr
	plain  net.Dialer
}

// Dial is a DialFunc.
func (d *SourceDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	var src netip.Addr
	network := "tcp4"
	switch a := ap.Addr().Unmap(); {
	case err != nil || !a.IsLoopback():
	case a.Is4():
		src = d.V4
	default:
		src, network = d.V6, "tcp6"
	}
	if !src.IsValid() {
		return d.plain.DialContext(ctx, "tcp", addr)
	}
	sd := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	c, err := sd.DialContext(ctx, network, addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return d.plain.DialContext(ctx, "tcp", addr)
	}
	return c, err
}

// CheckSource says whether src can be bound here (a listener on src:0, closed
// at once): the sidecar checks it at start and logs what it falls back to.
func CheckSource(src netip.Addr) error {
	network := "tcp4"
	if src.Is6() {
		network = "tcp6"
	}
	ln, err := net.Listen(network, netip.AddrPortFrom(src, 0).String())
	if err != nil {
		return err
	}
	return ln.Close()
}
