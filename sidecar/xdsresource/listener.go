package xdsresource

import (
	"fmt"
	"net/netip"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/xdswire"
)

const (
	hcmTypeURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpTypeURL = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
)

func decodeListener(m *xdswire.Listener) (*Listener, error) {
	e := errs{kind: "listener", name: m.GetName()}
	if err := checkName(e, "name", m.GetName()); err != nil {
		return nil, err
	}
	l := &Listener{Name: m.GetName()}
	if m.GetApiListener() != nil {
		// Proxyless gRPC listeners ride the same wildcard LDS; keep them, never bind.
		l.APIOnly = true
		return l, nil
	}
	ap, err := socketAddr(e, "address.socket_address", m.GetAddress())
	if err != nil {
		return nil, err
	}
	l.Addr = ap
	n := len(m.GetFilterChains())
	if n == 0 && m.GetDefaultFilterChain() == nil {
		return nil, e.at("filter_chains", "no filter chains and no default_filter_chain")
	}
	if n > MaxFilterChains {
		return nil, e.at("filter_chains", "%d chains, limit %d", n, MaxFilterChains)
	}
	// Two chains may share a port and transport when their destination
	// prefixes differ (TCP services told apart by VIP); an identical match
	// (same port, prefix, transport) is ambiguous, as Envoy says.
	type match struct {
		port      uint32
		prefix    netip.Prefix // zero: the chain has no prefix_ranges
		transport string
	}
	seen := make(map[match]int, n)
	l.FilterChains = make([]FilterChain, 0, n)
	ranges := 0
	for i, fc := range m.GetFilterChains() {
		field := fmt.Sprintf("filter_chains[%d]", i)
		c, err := decodeFilterChain(e, field, fc)
		if err != nil {
			return nil, err
		}
		if ranges += len(c.PrefixRanges); ranges > MaxListenerPrefixRanges {
			return nil, e.at(field+".filter_chain_match.prefix_ranges", "%d prefix ranges in the listener's chains so far, limit %d", ranges, MaxListenerPrefixRanges)
		}
		keys := c.PrefixRanges
		if len(keys) == 0 {
			keys = []netip.Prefix{{}}
		}
		for _, p := range keys {
			k := match{c.DestinationPort, p, c.TransportProtocol}
			if j, dup := seen[k]; dup {
				if p.IsValid() {
					return nil, e.at(field+".filter_chain_match", "same match as filter_chains[%d] (prefix range %s)", j, p)
				}
				return nil, e.at(field+".filter_chain_match", "same match as filter_chains[%d]", j)
			}
			seen[k] = i
		}
		l.FilterChains = append(l.FilterChains, c)
	}
	if d := m.GetDefaultFilterChain(); d != nil {
		c, err := decodeFilterChain(e, "default_filter_chain", d)
		if err != nil {
			return nil, err
		}
		l.Default = &c
	}
	if md := m.GetMetadata().GetFilterMetadata()[OverridesMetadataKey]; md != nil {
		if l.Overrides, err = decodeOverrides(e, md); err != nil {
			return nil, err
		}
	}
	if md := m.GetMetadata().GetFilterMetadata()[DNSMetadataKey]; md != nil {
		if l.DNS, err = decodeDNS(e, md); err != nil {
			return nil, err
		}
	}
	if err := checkOverrideNames(e, l); err != nil {
		return nil, err
	}
	return l, nil
}

func socketAddr(e errs, field string, a *xdswire.Address) (netip.AddrPort, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return netip.AddrPort{}, e.at(field, "required")
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return netip.AddrPort{}, e.at(field+".address", "not an IP literal: %q", sa.GetAddress())
	}
	if sa.GetProtocol() != xdswire.SocketAddress_TCP {
		return netip.AddrPort{}, e.at(field+".protocol", "only TCP is supported")
	}
	p := sa.GetPortValue()
	if p == 0 || p > 65535 {
		return netip.AddrPort{}, e.at(field+".port_value", "must be 1..65535, got %d", p)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

func decodeFilterChain(e errs, field string, fc *xdswire.FilterChain) (FilterChain, error) {
	c := FilterChain{Name: fc.GetName()}
	if mt := fc.GetFilterChainMatch(); mt != nil {
		if p := mt.GetDestinationPort(); p != nil {
			if p.GetValue() == 0 || p.GetValue() > 65535 {
				return c, e.at(field+".filter_chain_match.destination_port", "must be 1..65535, got %d", p.GetValue())
			}
			c.DestinationPort = p.GetValue()
		}
		// Matches we cannot evaluate would silently widen the chain; refuse them.
		if len(mt.GetServerNames()) > 0 || len(mt.GetSourcePrefixRanges()) > 0 ||
			len(mt.GetSourcePorts()) > 0 || len(mt.GetApplicationProtocols()) > 0 || len(mt.GetDirectSourcePrefixRanges()) > 0 ||
			mt.GetSourceType() != xdswire.FilterChainMatch_ANY || mt.GetAddressSuffix() != "" || mt.GetSuffixLen() != nil {
			return c, e.at(field+".filter_chain_match", "only destination_port, prefix_ranges and transport_protocol are supported")
		}
		prs, err := prefixRanges(e, field+".filter_chain_match.prefix_ranges", mt.GetPrefixRanges())
		if err != nil {
			return c, err
		}
		c.PrefixRanges = prs
		switch tp := mt.GetTransportProtocol(); tp {
		case TransportAny, TransportTLS, TransportRaw:
			c.TransportProtocol = tp
		default:
			return c, e.at(field+".filter_chain_match.transport_protocol", "%q: only %q and %q are detected", tp, TransportTLS, TransportRaw)
		}
	}
	if ts := fc.GetTransportSocket(); ts != nil {
		t, err := decodeDownstreamTLS(e, field+".transport_socket", ts)
		if err != nil {
			return c, err
		}
		if c.TransportProtocol != TransportTLS {
			return c, e.at(field+".filter_chain_match.transport_protocol", "a chain with a TLS transport socket must match transport_protocol %q", TransportTLS)
		}
		c.TLS = t
	} else if c.TransportProtocol == TransportTLS {
		return c, e.at(field+".transport_socket", "required for transport_protocol %q: TLS passthrough is not supported", TransportTLS)
	}
	fs := fc.GetFilters()
	if len(fs) == 0 || len(fs) > 1+authz.MaxFilters {
		return c, e.at(field+".filters", "want network RBAC filters (at most %d) then one terminal filter (http_connection_manager or tcp_proxy), got %d filters", authz.MaxFilters, len(fs))
	}
	// Network RBAC filters (rbac.go) come before the terminal filter.
	for i, nf := range fs[:len(fs)-1] {
		ff := fmt.Sprintf("%s.filters[%d]", field, i)
		if nf.GetTypedConfig().GetTypeUrl() != NetworkRBACTypeURL {
			return c, e.at(ff+".typed_config", "only envoy.filters.network.rbac may precede the terminal filter, got %q", nf.GetTypedConfig().GetTypeUrl())
		}
		m := &xdswire.NetworkRBAC{}
		if err := unpack(nf.GetTypedConfig(), NetworkRBACTypeURL, m); err != nil {
			return c, e.at(ff+".typed_config", "malformed network RBAC: %v", err)
		}
		f, err := decodeNetworkRBAC(e, ff+".typed_config", nf.GetName(), m)
		if err != nil {
			return c, err
		}
		c.RBAC = append(c.RBAC, f)
	}
	last := len(fs) - 1
	ff := fmt.Sprintf("%s.filters[%d]", field, last)
	tc := fs[last].GetTypedConfig()
	if tc == nil {
		return c, e.at(ff+".typed_config", "required")
	}
	switch tc.GetTypeUrl() {
	case hcmTypeURL:
		h := &xdswire.HttpConnectionManager{}
		if err := unpack(tc, hcmTypeURL, h); err != nil {
			return c, e.at(ff+".typed_config", "malformed HttpConnectionManager: %v", err)
		}
		if len(c.RBAC) > 0 {
			return c, e.at(field+".filters[0]", "network RBAC before http_connection_manager is not supported (pilot sends HTTP RBAC filters)")
		}
		m, err := decodeHCM(e, ff+".typed_config", h)
		if err != nil {
			return c, err
		}
		c.HTTP = m
		if c.RBAC, err = decodeHTTPFilters(e, ff+".typed_config", h); err != nil {
			return c, err
		}
	case tcpTypeURL:
		t := &xdswire.TcpProxy{}
		if err := unpack(tc, tcpTypeURL, t); err != nil {
			return c, e.at(ff+".typed_config", "malformed TcpProxy: %v", err)
		}
		p, err := decodeTCP(e, ff+".typed_config", t)
		if err != nil {
			return c, err
		}
		c.TCP = p
	default:
		return c, e.at(ff+".typed_config", "unsupported filter type %q", tc.GetTypeUrl())
	}
	return c, nil
}

// prefixRanges decodes a chain's destination CIDRs: at most MaxPrefixRanges,
// each an IP literal with a prefix_len that fits its family (absent: 0, as in
// Envoy), bits past the length masked off (Envoy ignores them too), none
// repeated. IPv4-mapped IPv6 prefixes are refused: destinations are matched
// unmapped, so such a range could never match; the IPv4 form says it.
func prefixRanges(e errs, field string, rs []*xdswire.CidrRange) ([]netip.Prefix, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	if len(rs) > MaxPrefixRanges {
		return nil, e.at(field, "%d prefix ranges, limit %d", len(rs), MaxPrefixRanges)
	}
	out := make([]netip.Prefix, 0, len(rs))
	seen := make(map[netip.Prefix]int, len(rs))
	for i, r := range rs {
		f := fmt.Sprintf("%s[%d]", field, i)
		ip, err := netip.ParseAddr(r.GetAddressPrefix())
		if err != nil || ip.Zone() != "" {
			return nil, e.at(f+".address_prefix", "not an IP literal: %q", r.GetAddressPrefix())
		}
		if ip.Is4In6() {
			return nil, e.at(f+".address_prefix", "%s is IPv4-mapped: use the IPv4 form", ip)
		}
		bits := r.GetPrefixLen().GetValue()
		if int(bits) > ip.BitLen() {
			return nil, e.at(f+".prefix_len", "%d is longer than the address %s (%d bits)", bits, ip, ip.BitLen())
		}
		p := netip.PrefixFrom(ip, int(bits)).Masked()
		if j, dup := seen[p]; dup {
			return nil, e.at(f, "%s repeats %s[%d]", p, field, j)
		}
		seen[p] = i
		out = append(out, p)
	}
	return out, nil
}

func decodeHCM(e errs, field string, h *xdswire.HttpConnectionManager) (*HTTPManager, error) {
	switch {
	case h.GetRds() != nil:
		n := h.GetRds().GetRouteConfigName()
		if err := checkName(e, field+".rds.route_config_name", n); err != nil {
			return nil, err
		}
		return &HTTPManager{RDSName: n}, nil
	case h.GetRouteConfig() != nil:
		rc, err := decodeRoutes(e, field+".route_config.", h.GetRouteConfig())
		if err != nil {
			return nil, err
		}
		return &HTTPManager{Inline: rc}, nil
	}
	return nil, e.at(field, "need rds or route_config")
}

func decodeTCP(e errs, field string, t *xdswire.TcpProxy) (*TCPProxy, error) {
	p := &TCPProxy{}
	switch {
	case t.GetCluster() != "":
		p.Clusters = []WeightedCluster{{Name: t.GetCluster(), Weight: 1}}
	case t.GetWeightedClusters() != nil:
		ws := t.GetWeightedClusters().GetClusters()
		if len(ws) == 0 || len(ws) > MaxWeightedTargets {
			return nil, e.at(field+".weighted_clusters.clusters", "want 1..%d clusters, got %d", MaxWeightedTargets, len(ws))
		}
		var sum uint64
		for i, w := range ws {
			f := fmt.Sprintf("%s.weighted_clusters.clusters[%d]", field, i)
			if err := checkName(e, f+".name", w.GetName()); err != nil {
				return nil, err
			}
			sum += uint64(w.GetWeight())
			p.Clusters = append(p.Clusters, WeightedCluster{Name: w.GetName(), Weight: w.GetWeight()})
		}
		if sum == 0 {
			return nil, e.at(field+".weighted_clusters", "weights sum to 0")
		}
	default:
		return nil, e.at(field+".cluster", "required")
	}
	d, err := duration(e, field+".idle_timeout", t.GetIdleTimeout(), 0)
	if err != nil {
		return nil, err
	}
	p.IdleTimeout = d
	return p, nil
}
