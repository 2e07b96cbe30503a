package app

import (
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/dns"
)

// dnsProxy is the bound DNS proxy (nil when off).
type dnsProxy struct {
	srv *dns.Server
	pc  net.PacketConn
	ln  net.Listener
}

// newDNS builds and binds the DNS proxy when --dns-addr says so or, without
// it, when the sidecar intercepts (the init step redirects port 53 to it). The
// nameservers of the pod's resolv.conf are read once, now. Nil when off.
func newDNS(s *render.Settings, snap dns.Snapshot, log hclog.Logger) (*dnsProxy, error) {
	addr, on := s.DNS.Listen(s.Node.Interception != node.InterceptionNone)
	if !on {
		return nil, nil
	}
	ups, ignored, err := dns.ReadResolvConf(s.DNS.ResolvConf)
	if err != nil {
		return nil, err
	}
	if ignored > 0 {
		log.Warn("resolv.conf has more nameservers than are used", "file", s.DNS.ResolvConf, "used", len(ups), "ignored", ignored)
	}
	if len(ups) == 0 {
		log.Warn("resolv.conf has no nameserver: names that are not the mesh's get SERVFAIL", "file", s.DNS.ResolvConf)
	}
	for _, u := range ups {
		if u == addr.String() {
			return nil, fmt.Errorf("dns: resolv.conf %s names the proxy's own address %s: every forward would loop", s.DNS.ResolvConf, u)
		}
	}
	srv, err := dns.New(dns.Config{Logger: log, Snapshot: snap, Namespace: s.Node.Namespace, Upstreams: ups, ResolvConf: s.DNS.ResolvConf,
		MaxInFlight: s.DNS.MaxInFlight, ForwardTimeout: s.DNS.ForwardTimeout, MaxTCPConns: s.DNS.MaxTCPConns})
	if err != nil {
		return nil, err
	}
	pc, ln, err := dns.Listen(addr)
	if err != nil {
		return nil, err
	}
	log.Info("DNS proxy", "addr", addr, "nameservers", ups, "namespace", s.Node.Namespace)
	return &dnsProxy{srv: srv, pc: pc, ln: ln}, nil
}

// status is the proxy's config_dump section; nil when off.
func (d *dnsProxy) status() func() *dns.Status {
	if d == nil {
		return nil
	}
	return d.srv.Status
}

// close releases the sockets of a proxy that never served (a failed start).
func (d *dnsProxy) close() {
	if d != nil {
		d.pc.Close()
		d.ln.Close()
	}
}
