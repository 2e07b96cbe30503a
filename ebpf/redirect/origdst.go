//go:build linux

package redirect

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (SOL_IP) and IP6T_SO_ORIGINAL_DST (SOL_IPV6).
const soOriginalDst = 80

// OriginalDst asks c's socket for SO_ORIGINAL_DST as the sidecar's listener
// does: (SOL_IP, 80) on an AF_INET socket, (SOL_IPV6, 80) on an AF_INET6 one.
// The self-test and this package's tests use it; the sidecar has its own in
// sidecar/listener.
func OriginalDst(c syscall.Conn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if err != nil {
			serr = fmt.Errorf("SO_DOMAIN: %w", err)
			return
		}
		switch domain {
		case unix.AF_INET:
			var sa unix.RawSockaddrInet4
			if serr = getsockopt(fd, unix.SOL_IP, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
				ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
			}
		case unix.AF_INET6:
			var sa unix.RawSockaddrInet6
			if serr = getsockopt(fd, unix.SOL_IPV6, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); serr == nil {
				ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port))
			}
		default:
			serr = fmt.Errorf("socket family %d", domain)
		}
	})
	if cerr != nil {
		return netip.AddrPort{}, cerr
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", serr)
	}
	return ap, nil
}

func getsockopt(fd uintptr, level int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst, uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// ntohs reads a port stored in network order.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
