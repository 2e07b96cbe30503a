package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// DefaultResolvConf is the file the pod's nameservers are read from.
const DefaultResolvConf = "/etc/resolv.conf"

// MaxUpstreams is how many nameservers are used, as glibc's MAXNS; later ones
// are ignored (ReadResolvConf says so).
const MaxUpstreams = 3

// MaxResolvConfBytes bounds the resolv.conf read.
const MaxResolvConfBytes = 64 << 10

// ReadResolvConf returns the nameservers of a resolv.conf(5) file as IP:53
// (at most MaxUpstreams; ignored the ones past it).
func ReadResolvConf(path string) (servers []string, ignored int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("dns: resolv.conf: %w", err)
	}
	if len(b) > MaxResolvConfBytes {
		return nil, 0, fmt.Errorf("dns: resolv.conf %s: %d bytes, limit %d", path, len(b), MaxResolvConfBytes)
	}
	cc, err := mdns.ClientConfigFromReader(strings.NewReader(string(b)))
	if err != nil {
		return nil, 0, fmt.Errorf("dns: resolv.conf %s: %w", path, err)
	}
	for _, ns := range cc.Servers {
		a, err := netip.ParseAddr(ns)
		if err != nil {
			return nil, 0, fmt.Errorf("dns: resolv.conf %s: nameserver %q is not an IP address", path, ns)
		}
		if len(servers) == MaxUpstreams {
			ignored++
			continue
		}
		servers = append(servers, netip.AddrPortFrom(a, 53).String())
	}
	return servers, ignored, nil
}

// forward asks the upstreams in order, each within its share of what is left
// of ForwardTimeout, over the query's transport. The query keeps its EDNS0
// record (its UDP size lowered to MaxUDPSize) and gets a fresh ID; the first
// answer is passed back as it is (rcode, TC, OPT), with the client's ID.
func (s *Server) forward(ctx context.Context, req *mdns.Msg, tcp bool) (*mdns.Msg, Outcome) {
	if len(s.cfg.Upstreams) == 0 {
		return reply(req, mdns.RcodeServerFailure), OutcomeUpstreamError
	}
	m := req.Copy()
	m.Id = mdns.Id()
	if opt := m.IsEdns0(); opt != nil && opt.UDPSize() > MaxUDPSize {
		opt.SetUDPSize(MaxUDPSize)
	}
	network := "udp"
	if tcp {
		network = "tcp"
	}
	deadline := time.Now().Add(s.cfg.ForwardTimeout)
	var last error
	for i, up := range s.cfg.Upstreams {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		r, err := s.exchange(ctx, m, network, up, left/time.Duration(len(s.cfg.Upstreams)-i))
		if err == nil {
			r.Id = req.Id
			return r, OutcomeForwarded
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	s.log.Debug("dns: no upstream answered", "name", qname(req), "network", network, "error", last)
	return reply(req, mdns.RcodeServerFailure), OutcomeUpstreamError
}

// exchange sends m to one upstream and reads its answer within timeout; ctx's
// end closes the connection (miekg's client honours only deadlines).
func (s *Server) exchange(ctx context.Context, m *mdns.Msg, network, addr string, timeout time.Duration) (*mdns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := net.Dialer{}
	if s.cfg.Dialer != nil {
		d = *s.cfg.Dialer
	}
	c := &mdns.Client{Net: network, Dialer: &d, Timeout: timeout, UDPSize: MaxUDPSize}
	conn, err := c.DialContext(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r, _, err := c.ExchangeWithConnContext(ctx, m, conn)
	if err != nil {
		return nil, err
	}
	// A reply must answer our question (the ID is checked by the client).
	if !r.Response || len(r.Question) != 1 || r.Question[0].Qtype != m.Question[0].Qtype ||
		r.Question[0].Qclass != m.Question[0].Qclass || !strings.EqualFold(r.Question[0].Name, m.Question[0].Name) {
		return nil, fmt.Errorf("upstream %s: reply does not answer the question", addr)
	}
	return r, nil
}
