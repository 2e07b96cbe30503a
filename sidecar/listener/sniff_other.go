//go:build !unix

package listener

import "net"

func peekByte(net.Conn) (byte, bool, error) { return 0, false, nil }
