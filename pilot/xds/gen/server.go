package gen

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// ServerListenerTemplate is the server_listener_resource_name_template a
// proxyless grpc-go xDS server (google.golang.org/grpc/xds.NewGRPCServer) must
// have in its bootstrap: it asks for the Listener
// "grpc/server?xds.resource.listening_address=<host:port>" of each address it
// serves on. Its node carries no namespace (it registers nothing) but its
// address (weft.address metadata): the Workloads at that address are what it
// serves.
const ServerListenerTemplate = "grpc/server?xds.resource.listening_address=%s"

// ServerListenerName is the Listener a proxyless server listening on ap asks for.
func ServerListenerName(ap netip.AddrPort) string {
	return fmt.Sprintf(ServerListenerTemplate, ap.String())
}

type serverSnapKey struct {
	address string
	v       clusterVariant
}

// withServerListeners adds to a proxyless node's snapshot base the server
// Listeners of the Workloads at its address, one per port they serve on, each
// under the names of the node's own address and of the wildcard addresses
// 0.0.0.0 and [::] (grpc-go names the address it listens on). Built once per
// mesh, address and variant.
func withServerListeners(mesh *ir.Mesh, n *node.Node, v clusterVariant, base *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	addr, err := netip.ParseAddr(n.Address)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", n.Address, err)
	}
	return derive(mesh, serverSnapKey{addr.String(), v}, func() (*snapshot.Snapshot, error) {
		ls, err := serverListeners(mesh, addr, v == proxylessTLSCerts)
		if err != nil || len(ls) == 0 {
			return base, err
		}
		sets := make(map[string]snapshot.Set, len(base.Resources))
		for typ, rs := range base.Resources {
			sets[typ] = snapshot.Set{Resources: rs, Version: base.Version(typ)}
		}
		sets[snapshot.ListenerType] = snapshot.NewSet(merged(base.Resources[snapshot.ListenerType], ls))
		return snapshot.FromSets(mesh.Revision, sets), nil
	})
}

// servedPort is one port a proxyless server serves, from the first Workload
// endpoint (by cluster name) at its address on that port.
type servedPort struct {
	port uint32
	ep   ir.Endpoint
}

// serverListeners renders the server Listeners for the Workloads at addr. A
// node with identity whose endpoint takes mTLS (ir.Endpoint.MTLS: the node
// proved the Workload's SPIFFE ID, the mode is not DISABLE) requires mTLS
// with the certificate-provider instances; grpc-go cannot sniff, so
// PERMISSIVE is served as STRICT (compile warns). Otherwise plaintext.
func serverListeners(mesh *ir.Mesh, addr netip.Addr, tls bool) (map[string]snapshot.Resource, error) {
	byPort := map[uint32]servedPort{}
	for _, c := range mesh.Clusters {
		if c.Subset != "" {
			continue
		}
		for _, ep := range c.Endpoints {
			if ep.Sidecar || ep.Address != addr.String() {
				continue
			}
			if _, ok := byPort[ep.Port]; !ok {
				byPort[ep.Port] = servedPort{port: ep.Port, ep: ep}
			}
		}
	}
	out := map[string]snapshot.Resource{}
	ports := slices.Sorted(maps.Keys(byPort))
	for _, p := range ports {
		sp := byPort[p]
		pick := pickAuthz(mesh, sp.ep.Namespace, sp.ep.Labels)
		for _, host := range []netip.Addr{addr, netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
			ap := netip.AddrPortFrom(host, uint16(p))
			name := ServerListenerName(ap)
			if _, dup := out[name]; dup {
				continue // the node's own address is a wildcard one
			}
			lis := serverListener(mesh.TrustDomain, name, ap, pick, tls && sp.ep.MTLS)
			r, err := snapshot.NewResource(snapshot.ListenerType, name, lis)
			if err != nil {
				return nil, err
			}
			out[name] = r
		}
	}
	return out, nil
}

// serverListener is what grpc-go's xDS server reads: its listening address, and
// one filter chain (grpc-go drops chains that match on destination_port) whose
// connection manager has an inline route configuration, every route a
// non_forwarding_action (a server routes nothing onward), and the RBAC filters
// before the router.
func serverListener(td, name string, ap netip.AddrPort, pick authzPick, tls bool) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: append(httpRBACFilters(td, pick), routerFilter),
	}
	chain := &listenerv3.FilterChain{Name: strings.TrimPrefix(name, "grpc/server?"), Filters: []*listenerv3.Filter{networkFilter(hcmFilterName, hcm)}}
	if tls {
		chain.TransportSocket = proxylessDownstreamTLS()
	}
	return &listenerv3.Listener{
		Name:         name,
		Address:      socketAddress(ap.Addr().String(), uint32(ap.Port())),
		FilterChains: []*listenerv3.FilterChain{chain},
	}
}
