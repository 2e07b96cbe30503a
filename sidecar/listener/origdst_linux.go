//go:build linux

package listener

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h): both 80.
const soOriginalDst = 80

func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("listener: original destination: %T is not a TCP connection", c)
	}
	// The socket's family decides the option's level: an AF_INET6 socket
	// carrying IPv4 (IPv4-mapped) answers SOL_IP, as an AF_INET one does.
	la, _ := tc.LocalAddr().(*net.TCPAddr)
	if la == nil {
		return netip.AddrPort{}, fmt.Errorf("listener: original destination: no local address")
	}
	level := unix.SOL_IP
	if la.IP.To4() == nil {
		level = unix.SOL_IPV6
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("listener: original destination: %w", err)
	}
	// sockaddr_in (16 bytes) or sockaddr_in6 (28 bytes); one buffer fits both.
	var buf [unix.SizeofSockaddrInet6]byte
	n := uint32(len(buf))
	var errno unix.Errno
	cerr := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	})
	switch {
	case cerr != nil:
		return netip.AddrPort{}, fmt.Errorf("listener: original destination: %w", cerr)
	case errno == unix.ENOENT:
		return netip.AddrPort{}, fmt.Errorf("listener: %w (local %s, peer %s)", ErrNoOriginalDst, la, tc.RemoteAddr())
	case errno != 0:
		return netip.AddrPort{}, fmt.Errorf("listener: getsockopt SO_ORIGINAL_DST (level %d): %w", level, errno)
	}
	return parseSockaddr(buf[:min(int(n), len(buf))])
}

// parseSockaddr reads a sockaddr_in or sockaddr_in6 (family in host order,
// port in network order) as the kernel wrote it.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 2 {
		return netip.AddrPort{}, fmt.Errorf("listener: SO_ORIGINAL_DST: %d-byte answer", len(b))
	}
	switch fam := *(*uint16)(unsafe.Pointer(&b[0])); fam {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.AddrPort{}, fmt.Errorf("listener: SO_ORIGINAL_DST: %d-byte sockaddr_in", len(b))
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
	case unix.AF_INET6:
		if len(b) < 24 {
			return netip.AddrPort{}, fmt.Errorf("listener: SO_ORIGINAL_DST: %d-byte sockaddr_in6", len(b))
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:4])), nil
	default:
		return netip.AddrPort{}, fmt.Errorf("listener: SO_ORIGINAL_DST: address family %d", fam)
	}
}
