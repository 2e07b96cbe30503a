// Package dataplanetest builds small Envoy v3 configurations for tests and benchmarks
// and runs them through xdsresource.Decode and dataplane.Compile, the same path the
// xDS client takes, and serves listeners and raw TCP peers for them.
package dataplanetest

import (
	"fmt"
	"net/netip"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// Resources is a set of protos by type URL.
type Resources map[string][]proto.Message

// Add appends resources of type typeURL.
func (r Resources) Add(typeURL string, ms ...proto.Message) Resources {
	r[typeURL] = append(r[typeURL], ms...)
	return r
}

// Compile decodes every resource and compiles the result.
func (r Resources) Compile(o dataplane.Options) (*dataplane.Config, error) {
	st, err := r.State()
	if err != nil {
		return nil, err
	}
	return dataplane.CompileWith(st, o)
}

// State decodes every resource into the xDS client's state shape.
func (r Resources) State() (map[string]map[string]any, error) {
	st := map[string]map[string]any{}
	for t, ms := range r {
		st[t] = map[string]any{}
		for _, m := range ms {
			a, err := anypb.New(m)
			if err != nil {
				return nil, err
			}
			n, v, err := xdsresource.Decode(t, a)
			if err != nil {
				return nil, err
			}
			st[t][n] = v
		}
	}
	return st, nil
}

// Any marshals m or panics (test fixtures only).
func Any(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func sockAddr(ap netip.AddrPort) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ap.Addr().String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ap.Port())},
	}}}
}

// HTTPListener is a listener whose only chain routes by RDS name.
func HTTPListener(name string, addr netip.AddrPort, rds string) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, Address: sockAddr(addr), FilterChains: []*listenerv3.FilterChain{HTTPChain(0, rds)}}
}

// HTTPChain is a filter chain (port 0: any) with an HCM pointing at rds.
func HTTPChain(port uint32, rds string) *listenerv3.FilterChain {
	h := &hcmv3.HttpConnectionManager{
		StatPrefix:     "http",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds}},
	}
	fc := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: Any(h)},
	}}}
	if port != 0 {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)}
	}
	return fc
}

// TCPChain is a filter chain proxying to cluster.
func TCPChain(port uint32, cluster string) *listenerv3.FilterChain {
	t := &tcpv3.TcpProxy{StatPrefix: "tcp", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}}
	fc := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
		Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: Any(t)},
	}}}
	if port != 0 {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)}
	}
	return fc
}

// Listener is a listener with the given chains.
func Listener(name string, addr netip.AddrPort, chains ...*listenerv3.FilterChain) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, Address: sockAddr(addr), FilterChains: chains}
}

// RouteConfig is a route configuration of virtual hosts.
func RouteConfig(name string, vhs ...*routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: vhs}
}

// VirtualHost is a virtual host of routes.
func VirtualHost(name string, domains []string, routes ...*routev3.Route) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: routes}
}

// PrefixRoute routes prefix to cluster with a timeout: 0 disables it (Envoy's
// meaning), a negative one leaves it unset so the sidecar's default applies.
func PrefixRoute(prefix, cluster string, timeout time.Duration) *routev3.Route {
	a := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}
	if timeout >= 0 {
		a.Timeout = durationpb.New(timeout)
	}
	return &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		Action: &routev3.Route_Route{Route: a},
	}
}

// ClusterOpts tune Cluster.
type ClusterOpts struct {
	LB       clusterv3.Cluster_LbPolicy
	HTTP2    bool
	MaxConns uint32
	MaxPend  uint32
	MaxReqs  uint32
	Connect  time.Duration
}

// EDSCluster is an EDS cluster named name.
func EDSCluster(name string, o ClusterOpts) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}},
		LbPolicy:             o.LB,
	}
	if o.Connect > 0 {
		c.ConnectTimeout = durationpb.New(o.Connect)
	}
	if o.MaxConns+o.MaxPend+o.MaxReqs > 0 {
		t := &clusterv3.CircuitBreakers_Thresholds{}
		if o.MaxConns > 0 {
			t.MaxConnections = wrapperspb.UInt32(o.MaxConns)
		}
		if o.MaxPend > 0 {
			t.MaxPendingRequests = wrapperspb.UInt32(o.MaxPend)
		}
		if o.MaxReqs > 0 {
			t.MaxRequests = wrapperspb.UInt32(o.MaxReqs)
		}
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{t}}
	}
	if o.HTTP2 {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": Any(&httpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
				}},
			}),
		}
	}
	return c
}

// Endpoints is a ClusterLoadAssignment with equal-weight healthy endpoints.
func Endpoints(name string, addrs ...netip.AddrPort) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	for _, a := range addrs {
		lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sockAddr(a)}}})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}

// MarkPeer marks the endpoints of cla at addrs as peer sidecars' inbound
// listeners, the way pilot does (filter_metadata weft.peer = "sidecar").
func MarkPeer(cla *endpointv3.ClusterLoadAssignment, addrs ...netip.AddrPort) *endpointv3.ClusterLoadAssignment {
	for _, le := range cla.Endpoints {
		for _, lb := range le.LbEndpoints {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			for _, a := range addrs {
				if sa.GetAddress() == a.Addr().String() && sa.GetPortValue() == uint32(a.Port()) {
					lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft": {Fields: map[string]*structpb.Value{
						"peer": structpb.NewStringValue("sidecar"),
					}}}}
				}
			}
		}
	}
	return cla
}

// Simple is a one-listener, one-route, one-cluster HTTP config: listener name at
// listen routes every host to cluster "backend" whose endpoints are upstreams.
func Simple(name string, listen netip.AddrPort, h2 bool, upstreams ...netip.AddrPort) Resources {
	r := Resources{}
	r.Add(xdsresource.ListenerType, HTTPListener(name, listen, "routes"))
	r.Add(xdsresource.RouteType, RouteConfig("routes", VirtualHost("all", []string{"*"}, PrefixRoute("/", "backend", 0))))
	r.Add(xdsresource.ClusterType, EDSCluster("backend", ClusterOpts{HTTP2: h2, MaxConns: 4096, MaxPend: 4096, MaxReqs: 65536}))
	r.Add(xdsresource.EndpointType, Endpoints("backend", upstreams...))
	return r
}

// MustAddr parses "ip:port".
func MustAddr(s string) netip.AddrPort {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		panic(fmt.Sprintf("dataplanetest: %v", err))
	}
	return ap
}

// TCPChainIdle is TCPChain with an idle timeout.
func TCPChainIdle(port uint32, cluster string, idle time.Duration) *listenerv3.FilterChain {
	t := &tcpv3.TcpProxy{StatPrefix: "tcp", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}, IdleTimeout: durationpb.New(idle)}
	fc := TCPChain(port, cluster)
	fc.Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: Any(t)}
	return fc
}

// WithPrefixRanges sets fc's filter_chain_match.prefix_ranges to cidrs
// ("240.240.0.1/32", "10.0.0.0/8", "fd00::1/128"); a bare address is a
// full-length prefix.
func WithPrefixRanges(fc *listenerv3.FilterChain, cidrs ...string) *listenerv3.FilterChain {
	if fc.FilterChainMatch == nil {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{}
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				panic(fmt.Sprintf("dataplanetest: %v", err))
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		fc.FilterChainMatch.PrefixRanges = append(fc.FilterChainMatch.PrefixRanges,
			&corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))})
	}
	return fc
}

// WithDefault sets l's default_filter_chain.
func WithDefault(l *listenerv3.Listener, fc *listenerv3.FilterChain) *listenerv3.Listener {
	l.DefaultFilterChain = fc
	return l
}

// OriginalDstCluster is Istio's PassthroughCluster shape: type ORIGINAL_DST,
// lb_policy CLUSTER_PROVIDED, no endpoints (connect 0: Envoy's default).
func OriginalDstCluster(name string, connect time.Duration) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
	}
	if connect > 0 {
		c.ConnectTimeout = durationpb.New(connect)
	}
	return c
}

// BlackHoleCluster is Istio's BlackHoleCluster shape: STATIC, no endpoints.
func BlackHoleCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
}
