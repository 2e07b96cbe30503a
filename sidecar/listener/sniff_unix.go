//go:build unix

package listener

import (
	"net"
	"syscall"
)

// peekByte waits (within c's read deadline) for c's first byte and returns it
// without consuming it: a MSG_PEEK recv on the socket, so the connection handed
// on is still the *net.TCPConn (splice for TCP proxying keeps working).
// ok=false: c is not a socket; the caller reads instead.
func peekByte(c net.Conn) (b byte, ok bool, err error) {
	sc, isSock := c.(syscall.Conn)
	if !isSock {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var buf [1]byte
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
		return rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK // false: wait for readability
	})
	switch {
	case err != nil:
		return 0, true, err
	case rerr != nil:
		return 0, true, rerr
	case n == 0:
		return 0, true, errEOF
	}
	return buf[0], true, nil
}
