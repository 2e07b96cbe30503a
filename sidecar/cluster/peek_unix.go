//go:build unix

package cluster

import "syscall"

// peek is the syscall.RawConn callback of quiet: a non-blocking MSG_PEEK recv of one
// byte. EAGAIN (nothing waiting) is the only healthy answer; a byte, end of stream
// (0) or an error all mean the connection must not carry another request.
func (c *Conn) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.peekBad = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	return true // done: never wait for readability
}
