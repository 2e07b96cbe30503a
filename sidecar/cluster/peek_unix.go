//go:build unix

package cluster

import "syscall"

// peek is the syscall.RawConn.Control callback of quiet: a non-blocking MSG_PEEK
// recv of one byte. EAGAIN (nothing waiting) is the only healthy answer; a byte, end
// of stream (0) or an error all mean the connection must not carry another request.
// Control, not Read: the recv never waits, and Read would refuse a connection whose
// last user's deadline has passed (Get's caller sets its own).
func (c *Conn) peek(fd uintptr) {
	_, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peekBad = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}
