//go:build !linux

package listener

import (
	"errors"
	"net"
	"net/netip"
)

func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("listener: SO_ORIGINAL_DST: interception needs Linux")
}
