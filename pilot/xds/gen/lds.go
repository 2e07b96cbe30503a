package gen

import (
	"net/netip"
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	origdstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Well-known filter names.
const (
	hcmFilterName     = "envoy.filters.network.http_connection_manager"
	tcpFilterName     = "envoy.filters.network.tcp_proxy"
	routerFilterName  = "envoy.filters.http.router"
	origDstFilterName = "envoy.filters.listener.original_dst"
)

// mustAny packs m deterministically: an RBAC filter's policies are a map, and
// the bytes must be the same on every build for versions to be stable.
func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err) // only messages built here, which always marshal
	}
	return a
}

// routerFilter is the terminal HTTP filter; grpc-go NACKs a connection manager
// whose filter list is empty or does not end with it.
var routerFilter = &hcmv3.HttpFilter{Name: routerFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}}

var originalDst = &listenerv3.ListenerFilter{Name: origDstFilterName, ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&origdstv3.OriginalDst{})}}

func rdsHCM(statPrefix, routeName string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: routeName}},
		HttpFilters:    []*hcmv3.HttpFilter{routerFilter},
	}
}

// apiListener is what a proxyless gRPC client dialing xds:///<name> reads: an
// api_listener HttpConnectionManager taking its routes over ADS from the route
// configuration of the same name.
func apiListener(name string) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(rdsHCM(name, name))},
	}
}

func networkFilter(name string, m proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(m)}}
}

func tcpProxy(statPrefix, cluster string) *listenerv3.Filter {
	return networkFilter(tcpFilterName, &tcpv3.TcpProxy{StatPrefix: statPrefix, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}})
}

func portMatch(p uint32) *listenerv3.FilterChainMatch {
	return &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(p)}
}

// outbound renders the outbound listener of namespace ns's sidecars and its
// route configurations (issue #10's wire). Traffic is captured to
// 127.0.0.1:15001 and the chain is picked by original destination IP and port:
//   - a port P with HTTP-family services: one HTTP chain "outbound|P" whose
//     prefix_ranges are the VIPs of every such service on P, and whose route
//     configuration "outbound|P" has a virtual host per service (by Host:
//     its names and its VIPs, each also with ":P");
//   - a TCP service S on P: a tcp_proxy chain "outbound|P|tcp|<svc>.<ns>"
//     whose prefix_ranges are S's VIPs, so TCP services sharing a port are
//     told apart by address. There is no port-only TCP chain;
//   - anything else: the default_filter_chain, tcp_proxy to
//     PassthroughCluster (ALLOW_ANY) or BlackHoleCluster (REGISTRY_ONLY).
//
// An app that addresses the sidecar explicitly (the destination is the
// listener's own address) has its chain picked by port alone; the sidecar
// takes the first chain of the port in wire order, so the chains of a port
// go HTTP first, then the TCP services of the sidecar's own namespace, then
// the others in scope order (the choice before VIPs existed). Services
// without VIPs (stored before issue #10 and not applied since) are reachable
// that way only: their chain's prefix range is the listener's own address
// (explicitOnly), which no intercepted connection has; of several such TCP
// services on a port only the first gets a chain, and none when the port
// has an HTTP chain. The listener exists for every sidecar, even with
// nothing in scope: an intercepted app's connections outside the mesh still
// reach it. It carries the scope's DNS name table (dnsMetadata).
//
// The wire above is what an intercepted sidecar (node.Interception set) gets.
// An explicit one (intercept false) gets its chains by port alone (no
// prefix_ranges: one chain per port, HTTP else the first TCP service), no
// default chain or passthrough clusters, and no listener for an empty scope,
// as before issue #10; its vhosts still list the VIPs, and the listener the
// name table. Why: such a sidecar recognises a connection made to it
// explicitly by the listener's own address from LDS (127.0.0.1:15001), but
// sidecars listen where --outbound-addr says (tests use 127.x.y.z addresses,
// or the service port), and such a connection would then be matched by IP
// (no VIP matches; the default chain would pass it through to itself).
func outbound(mesh *ir.Mesh, ns string, scope []*ir.Service, intercept bool) (*listenerv3.Listener, []*routev3.RouteConfiguration, error) {
	type portGroup struct {
		http []vhostSpec
		tcp  []*ir.Service // own namespace first, then scope order
	}
	groups := map[uint32]*portGroup{}
	for _, svc := range scope {
		for _, p := range svc.Ports {
			g := groups[p.Port]
			if g == nil {
				g = &portGroup{}
				groups[p.Port] = g
			}
			if p.Protocol.IsHTTP() {
				g.http = append(g.http, vhostSpec{svc: svc, port: p, rules: svc.RulesFor(ns, p), shortNames: svc.Namespace == ns, vips: true})
				continue
			}
			g.tcp = append(g.tcp, svc)
		}
	}
	ports := make([]uint32, 0, len(groups))
	for p, g := range groups {
		ports = append(ports, p)
		slices.SortStableFunc(g.tcp, func(a, b *ir.Service) int { return boolRank(a.Namespace != ns) - boolRank(b.Namespace != ns) })
	}
	slices.Sort(ports)
	lis := &listenerv3.Listener{
		Name:            OutboundListenerName,
		Address:         socketAddress(OutboundAddress, OutboundPort),
		ListenerFilters: []*listenerv3.ListenerFilter{originalDst},
	}
	// addrs are a service's VIPs as this wire sees them; explicit is the
	// prefix range of a chain without VIPs (nil: the port alone).
	addrs := func(svc *ir.Service) []string { return svc.Addresses }
	explicit := []netip.Prefix{explicitOnly}
	if intercept {
		lis.DefaultFilterChain = defaultChain(mesh.OutboundPolicy)
	} else {
		if len(groups) == 0 {
			return nil, nil, nil
		}
		addrs = func(*ir.Service) []string { return nil }
		explicit = nil
	}
	md, err := dnsMetadata(ns, mesh.TrustDomain, scope)
	if err != nil {
		return nil, nil, err
	}
	lis.Metadata = md
	var rcs []*routev3.RouteConfiguration
	for _, port := range ports {
		g := groups[port]
		explicitTaken := false
		if len(g.http) > 0 {
			name := OutboundRouteName(port)
			rcs = append(rcs, routeConfig(name, g.http))
			var vips []string
			for _, v := range g.http {
				vips = append(vips, addrs(v.svc)...)
			}
			prefixes := vipPrefixes(vips)
			if len(prefixes) == 0 {
				prefixes = explicit
			}
			lis.FilterChains = append(lis.FilterChains, &listenerv3.FilterChain{
				Name:             name,
				FilterChainMatch: vipMatch(port, prefixes),
				Filters:          []*listenerv3.Filter{networkFilter(hcmFilterName, rdsHCM(name, name))},
			})
			explicitTaken = true // explicit apps on this port get the HTTP chain
		}
		for _, svc := range g.tcp {
			prefixes := vipPrefixes(addrs(svc))
			if len(prefixes) == 0 {
				if explicitTaken {
					continue
				}
				prefixes, explicitTaken = explicit, true
			}
			cl := svc.PortByNumber(port).Cluster
			lis.FilterChains = append(lis.FilterChains, &listenerv3.FilterChain{
				Name:             tcpChainName(port, svc),
				FilterChainMatch: vipMatch(port, prefixes),
				Filters:          []*listenerv3.Filter{tcpProxy(cl, cl)},
			})
		}
	}
	if err := checkPrefixBounds(ns, lis.FilterChains); err != nil {
		return nil, nil, err
	}
	return lis, rcs, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inboundSet is the per-node part of a sidecar's snapshot.
type inboundSet struct {
	listeners, clusters map[string]snapshot.Resource
}

// inbound renders the node's inbound listener (0.0.0.0:<inboundPort>) with one
// filter chain per target port of the Services it backs (c.backs), matched by
// original destination port, and one STATIC "inbound|<targetPort>||" cluster
// per chain. HTTP-family ports get a connection manager with an inline route to
// the inbound cluster; TCP ports a tcp_proxy. When two services use the same
// target port, the first (by name) decides its protocol.
//
// Peers' sidecars connect to this listener directly (the endpoint of a
// registered sidecar is address:inboundPort), so the original destination port
// is the listener's own: the default_filter_chain serves those connections,
// see inboundDirect. A node that backs no Service gets no inbound listener.
func inbound(mesh *ir.Mesh, c class) (*inboundSet, error) {
	seen := map[uint32]bool{}
	var ports []*ir.Port
	for _, svc := range c.backs {
		for _, p := range svc.Ports {
			if !seen[p.TargetPort] {
				seen[p.TargetPort] = true
				ports = append(ports, p)
			}
		}
	}
	set := &inboundSet{listeners: map[string]snapshot.Resource{}, clusters: map[string]snapshot.Resource{}}
	if len(ports) == 0 {
		return set, nil
	}
	slices.SortFunc(ports, func(a, b *ir.Port) int { return int(a.TargetPort) - int(b.TargetPort) })
	td := mesh.TrustDomain
	httpFilters, tcpFilters := httpRBACFilters(td, c.authz), tcpRBACFilters(td, c.authz)
	lis := &listenerv3.Listener{
		Name:            InboundListenerName,
		Address:         socketAddress(InboundAddress, c.inboundPort),
		ListenerFilters: []*listenerv3.ListenerFilter{originalDst},
		Metadata:        overridesMetadata(c.authz),
	}
	direct := inboundDirect(c, httpFilters, tcpFilters)
	if c.tlsChains() {
		// Peer sidecars dial the listener's own port: explicit chains for it
		// (by transport), and no default chain a plaintext connection to any
		// other port could fall into.
		if direct != nil {
			lis.FilterChains = append(lis.FilterChains, c.byTransport(direct, c.inboundPort)...)
		}
	} else {
		lis.DefaultFilterChain = direct
	}
	for _, p := range ports {
		cl := ir.InboundClusterName(p.TargetPort)
		chain := &listenerv3.FilterChain{Name: cl, FilterChainMatch: portMatch(p.TargetPort)}
		if p.Protocol.IsHTTP() {
			chain.Filters = []*listenerv3.Filter{inboundHCM(cl, []*routev3.VirtualHost{inboundVhost(cl, []string{"*"}, cl)}, httpFilters)}
		} else {
			chain.Filters = append(slices.Clone(tcpFilters), tcpProxy(cl, cl))
		}
		lis.FilterChains = append(lis.FilterChains, c.byTransport(chain, p.TargetPort)...)
		ic := inboundCluster(p)
		ic.Metadata = rateLimitMetadata(inboundRateLimit(c, p.TargetPort))
		r, err := snapshot.NewResource(snapshot.ClusterType, cl, ic)
		if err != nil {
			return nil, err
		}
		set.clusters[cl] = r
	}
	r, err := snapshot.NewResource(snapshot.ListenerType, InboundListenerName, lis)
	if err != nil {
		return nil, err
	}
	set.listeners[InboundListenerName] = r
	return set, nil
}

// inboundDirect is the chain for connections made to the inbound listener
// itself. There is no original port to go by, so:
//   - HTTP: route by Host header. With one HTTP target port everything goes
//     there; otherwise each backed service port gets a virtual host with its
//     port-qualified names ("reviews:9080", "reviews.shop:9080", ...), and the
//     bare names go to the service's first HTTP-family port.
//   - no HTTP port and exactly one TCP target port: tcp_proxy to it.
//   - no HTTP port and several TCP ports: nil (ambiguous; only intercepted
//     connections, matched by port, reach them).
func inboundDirect(c class, httpFilters []*hcmv3.HttpFilter, tcpFilters []*listenerv3.Filter) *listenerv3.FilterChain {
	type httpPort struct {
		svc   *ir.Service
		port  *ir.Port
		first bool
	}
	var https []httpPort
	var tcps []uint32
	for _, svc := range c.backs {
		first := true
		for _, p := range svc.Ports {
			if !p.Protocol.IsHTTP() {
				if !slices.Contains(tcps, p.TargetPort) {
					tcps = append(tcps, p.TargetPort)
				}
				continue
			}
			https = append(https, httpPort{svc: svc, port: p, first: first})
			first = false
		}
	}
	const name = "inbound|direct"
	targets := map[uint32]bool{}
	for _, h := range https {
		targets[h.port.TargetPort] = true
	}
	switch {
	case len(https) == 0 && len(tcps) == 1:
		cl := ir.InboundClusterName(tcps[0])
		return &listenerv3.FilterChain{Name: name, Filters: append(slices.Clone(tcpFilters), tcpProxy(cl, cl))}
	case len(https) == 0:
		return nil
	case len(targets) == 1:
		cl := ir.InboundClusterName(https[0].port.TargetPort)
		return &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{inboundHCM(name, []*routev3.VirtualHost{inboundVhost(name, []string{"*"}, cl)}, httpFilters)}}
	}
	vhosts := make([]*routev3.VirtualHost, 0, len(https))
	for _, h := range https {
		all := domains(h.svc, h.port.Port, true)
		var ds []string
		for i, d := range all {
			if i%2 == 1 || h.first { // odd entries are the ":<port>" forms
				ds = append(ds, d)
			}
		}
		vhosts = append(vhosts, inboundVhost(APIListenerName(h.svc.Host, h.port.Port), ds, ir.InboundClusterName(h.port.TargetPort)))
	}
	return &listenerv3.FilterChain{Name: name, Filters: []*listenerv3.Filter{inboundHCM(name, vhosts, httpFilters)}}
}

// byTransport returns chain as the inbound listener serves it on port for the
// class's mTLS mode: with TLS chains (the node has an identity and its mode
// is not DISABLE) STRICT is one chain for "tls" with the DownstreamTlsContext,
// PERMISSIVE that and one for "raw_buffer"; otherwise the chain as it is,
// matched by port alone.
func (c class) byTransport(chain *listenerv3.FilterChain, port uint32) []*listenerv3.FilterChain {
	chain.FilterChainMatch = portMatch(port)
	if !c.tlsChains() {
		return []*listenerv3.FilterChain{chain}
	}
	tls := &listenerv3.FilterChain{
		Name:             chain.Name + "|tls",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port), TransportProtocol: TransportProtocolTLS},
		TransportSocket:  sidecarDownstreamTLS(),
		Filters:          chain.Filters,
	}
	if c.mode != ir.MTLSPermissive {
		return []*listenerv3.FilterChain{tls}
	}
	raw := &listenerv3.FilterChain{
		Name:             chain.Name + "|raw",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port), TransportProtocol: TransportProtocolRaw},
		Filters:          chain.Filters,
	}
	return []*listenerv3.FilterChain{tls, raw}
}

// inboundHCM is an inbound connection manager with an inline route
// configuration; filters (RBAC, see rbac.go) go before the router.
//
// A port permission of those filters (destination_port) names the workload's
// target port: on an intercepted connection that is the original destination
// port; on the inbound listener's own port, where peer sidecars connect, it
// is the target port of the inbound cluster the request is routed to.
func inboundHCM(name string, vhosts []*routev3.VirtualHost, filters []*hcmv3.HttpFilter) *listenerv3.Filter {
	return networkFilter(hcmFilterName, &hcmv3.HttpConnectionManager{
		StatPrefix:     name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: name, VirtualHosts: vhosts}},
		HttpFilters:    append(slices.Clone(filters), routerFilter),
	})
}

func inboundVhost(name string, domains []string, cluster string) *routev3.VirtualHost {
	return &routev3.VirtualHost{
		Name:    name,
		Domains: domains,
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}, Timeout: durationpb.New(0)}},
		}},
	}
}
