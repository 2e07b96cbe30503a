//go:build !unix

package cluster

// peek has no portable non-blocking check here: only buffered bytes are detected.
func (c *Conn) peek(uintptr) {}
