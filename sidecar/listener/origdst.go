package listener

import (
	"errors"
	"net"
	"net/netip"
)

// ErrNoOriginalDst: the kernel has no original destination for the
// connection (getsockopt SO_ORIGINAL_DST said ENOENT): it was not redirected
// by iptables or eBPF, and no connection tracking saw it.
var ErrNoOriginalDst = errors.New("no original destination (SO_ORIGINAL_DST): the connection was not redirected")

// OrigDst is the interception-mode Destination: the address the client
// originally connected to, as the kernel keeps it for a redirected connection
// (iptables REDIRECT: conntrack; eBPF: the cgroup/getsockopt program), read
// with getsockopt(SOL_IP, SO_ORIGINAL_DST) on IPv4 and IPv4-mapped sockets and
// getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST) on IPv6 ones, as Envoy's
// original_dst listener filter does. Allocation-free on Linux; elsewhere it
// reports that interception is not supported.
type OrigDst struct {
	// Fallback answers for a connection without an original destination
	// (ErrNoOriginalDst: one made to the listener itself, in a namespace where
	// nothing tracks connections); nil: that is an error.
	Fallback Destination
}

// Destination returns c's original destination.
func (o OrigDst) Destination(c net.Conn) (netip.AddrPort, error) {
	ap, err := originalDst(c)
	if err != nil && o.Fallback != nil && errors.Is(err, ErrNoOriginalDst) {
		return o.Fallback.Destination(c)
	}
	return ap, err
}
