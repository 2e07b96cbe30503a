package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"
)

// Defaults for the zero fields of Config (Istio's numbers, as bootstrap/intercept).
const (
	DefaultOutboundPort = 15001
	DefaultDNSPort      = 15053
	DefaultProxyUID     = 1337
	// DefaultMaxConns bounds each connection map (original destination by
	// socket cookie, and by 4-tuple). Both are LRU maps: past the bound the
	// least recently used entry goes. A tuple entry is needed only between
	// the handshake and the sidecar's SO_ORIGINAL_DST (the listen backlog,
	// 4096 by default, bounds those); a cookie entry while its socket lives
	// (sock_release frees it), for getpeername and DNS replies: past the
	// bound the oldest redirected sockets see the sidecar as their peer, and
	// a DNS reply to them is not re-addressed. The maps are preallocated and
	// charged to the attaching process's memory cgroup: measured (bpftool
	// map show, memlock) 96 bytes an entry by cookie and 136 by tuple, so
	// 1.9 MB at this default.
	DefaultMaxConns = 8192
	// MaxConnsLimit is the largest Config.MaxConns accepted.
	MaxConnsLimit = 1 << 20
	// MaxOwnAddrs bounds Config.OwnAddrs (the programs' map of them is this
	// size): a pod has one IPv4 and a few IPv6 addresses.
	MaxOwnAddrs = 16
	// DefaultSelfTestTimeout bounds SelfTest when its context has no deadline.
	DefaultSelfTestTimeout = 2 * time.Second
)

// Config says where and how to redirect. The zero value of every field but
// Cgroup means its default.
type Config struct {
	// Cgroup is the pod's cgroup v2 directory (absolute). The cgroup root is
	// refused: it holds every process on the machine.
	Cgroup string
	// OutboundPort is the sidecar's outbound listener: 127.0.0.1 for IPv4 and
	// IPv4-mapped destinations, [::1] for IPv6 ones.
	OutboundPort uint16
	// DNSPort is the sidecar's DNS proxy (127.0.0.1, or [::1] for IPv6
	// servers), used when DNS is set.
	DNSPort uint16
	// ProxyUID is the sidecar's uid: its sockets are never redirected.
	ProxyUID uint32
	// ExcludeMark, when not 0, also excludes sockets carrying this SO_MARK
	// (set before connect).
	ExcludeMark uint32
	// DNS redirects UDP and TCP to port 53 (any address) to DNSPort.
	DNS bool
	// MaxConns sizes the connection maps (DefaultMaxConns when 0).
	MaxConns uint32
	// OwnAddrs are the pod's own addresses (IPv4, IPv6; a zone is ignored):
	// TCP to one of them is not redirected but stays in the pod, as iptables
	// leaves it (its nat OUTPUT returns what leaves by lo). At most
	// MaxOwnAddrs. Read at Attach: an address the pod gains later is
	// redirected. Loopback is never redirected and need not be listed.
	OwnAddrs []netip.Addr
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.OutboundPort == 0 {
		c.OutboundPort = DefaultOutboundPort
	}
	if c.DNSPort == 0 {
		c.DNSPort = DefaultDNSPort
	}
	if c.ProxyUID == 0 {
		c.ProxyUID = DefaultProxyUID
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}

// Validate checks c (after defaults) without touching the system.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Cgroup == "":
		return errors.New("redirect: Config.Cgroup is empty: give the pod's cgroup v2 directory")
	case !filepath.IsAbs(c.Cgroup):
		return fmt.Errorf("redirect: Config.Cgroup %q is not an absolute path", c.Cgroup)
	case c.DNS && c.DNSPort == c.OutboundPort:
		return fmt.Errorf("redirect: Config.DNSPort %d is also Config.OutboundPort", c.DNSPort)
	case c.MaxConns > MaxConnsLimit:
		return fmt.Errorf("redirect: Config.MaxConns %d is above the limit %d", c.MaxConns, MaxConnsLimit)
	case len(c.OwnAddrs) > MaxOwnAddrs:
		return fmt.Errorf("redirect: Config.OwnAddrs has %d addresses, more than MaxOwnAddrs (%d)", len(c.OwnAddrs), MaxOwnAddrs)
	}
	for i, a := range c.OwnAddrs {
		if !a.IsValid() {
			return fmt.Errorf("redirect: Config.OwnAddrs[%d] is not an address", i)
		}
	}
	return nil
}
