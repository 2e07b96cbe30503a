package intercept

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// addPassthroughV6 adds ::6/128 to lo, as istio-iptables does when IPv6 is on: IPv4
// lets a socket bind any 127/8 address, IPv6 only the addresses lo has (::1), so the
// sidecar could not bind the inbound-passthrough source ::6 the rules exempt. Present
// already is fine. Done with one rtnetlink request (no iproute2 in the image needed).
func addPassthroughV6() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("adding %s to lo: %w", InboundPassthroughV6, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("adding %s to lo: netlink: %w", InboundPassthroughV6, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("adding %s to lo: netlink: %w", InboundPassthroughV6, err)
	}
	if err := unix.Sendto(fd, newAddrRequest(lo.Index, netip.MustParseAddr(InboundPassthroughV6)), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("adding %s to lo: netlink: %w", InboundPassthroughV6, err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("adding %s to lo: netlink: %w", InboundPassthroughV6, err)
	}
	if err := ackError(buf[:n]); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding %s to lo: %w", InboundPassthroughV6, err)
	}
	return nil
}

// newAddrRequest is RTM_NEWADDR for addr/128 on ifindex, host scope, no DAD, asking
// for an ack.
func newAddrRequest(ifindex int, addr netip.Addr) []byte {
	a := addr.As16()
	attr := func(typ uint16, data []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr+len(data))
		binary.NativeEndian.PutUint16(b[0:2], uint16(len(b)))
		binary.NativeEndian.PutUint16(b[2:4], typ)
		copy(b[unix.SizeofRtAttr:], data)
		return b // 4+16 bytes: already 4-aligned
	}
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = unix.AF_INET6
	body[1] = 128
	body[2] = unix.IFA_F_NODAD
	body[3] = unix.RT_SCOPE_HOST
	binary.NativeEndian.PutUint32(body[4:8], uint32(ifindex))
	body = append(body, attr(unix.IFA_LOCAL, a[:])...)
	body = append(body, attr(unix.IFA_ADDRESS, a[:])...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:6], unix.RTM_NEWADDR)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:12], 1) // sequence
	return append(msg, body...)
}

// ackError reads the NLMSG_ERROR answer: nil for an ack (error 0).
func ackError(b []byte) error {
	if len(b) < unix.SizeofNlMsghdr+4 {
		return fmt.Errorf("netlink: short answer (%d bytes)", len(b))
	}
	if typ := binary.NativeEndian.Uint16(b[4:6]); typ != unix.NLMSG_ERROR {
		return fmt.Errorf("netlink: answer type %d, want an ack", typ)
	}
	if code := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}
