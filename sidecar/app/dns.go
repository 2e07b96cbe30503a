package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/render"
	"github.com/weft-mesh/weft/sidecar/dns"
)

// dnsProxy is the bound DNS proxy (nil when off).
type dnsProxy struct {
	srv *dns.Server
	pcs []net.PacketConn
	lns []net.Listener
}

// dnsIPv6Loopback is where the DNS proxy also listens by default: the ip6tables
// rules redirect an IPv6 query to port 15053 of [::1].
var dnsIPv6Loopback = netip.MustParseAddrPort("[::1]:15053")

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
	d := &dnsProxy{srv: srv}
	pc, ln, err := dns.Listen(addr)
	if err != nil {
		return nil, err
	}
	d.pcs, d.lns = append(d.pcs, pc), append(d.lns, ln)
	bound := []string{addr.String()}
	// The default address also on IPv6 loopback, when the pod has one.
	if !s.DNS.Addr.IsValid() && addr.Port() == dnsIPv6Loopback.Port() {
		pc, ln, err := dns.Listen(dnsIPv6Loopback)
		switch {
		case err == nil:
			d.pcs, d.lns = append(d.pcs, pc), append(d.lns, ln)
			bound = append(bound, dnsIPv6Loopback.String())
		case errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT):
			log.Debug("no IPv6 loopback: DNS proxy on IPv4 only", "error", err)
		default:
			d.close()
			return nil, err
		}
	}
	log.Info("DNS proxy", "addrs", bound, "nameservers", ups, "namespace", s.Node.Namespace)
	return d, nil
}

// serve runs the proxy on every bound address until ctx ends.
func (d *dnsProxy) serve(ctx context.Context) error {
	errc := make(chan error, len(d.pcs))
	for i := range d.pcs {
		go func() { errc <- d.srv.Serve(ctx, d.pcs[i], d.lns[i]) }()
	}
	var errs []error
	for range d.pcs {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
	if d == nil {
		return
	}
	for i := range d.pcs {
		d.pcs[i].Close()
		d.lns[i].Close()
	}
}
