package gen

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Issue #10's outbound wire (VIPs, passthrough, DNS names); see outbound.

// Clusters for destinations outside the mesh (Istio's names), in every
// sidecar's CDS. The outbound listener's default_filter_chain sends to one of
// them, by MeshConfig.outboundTrafficPolicy.
const (
	// PassthroughCluster (ALLOW_ANY) is ORIGINAL_DST: each connection goes to
	// its own original destination.
	PassthroughCluster = "PassthroughCluster"
	// BlackHoleCluster (REGISTRY_ONLY) is STATIC with no endpoints: the
	// sidecar closes what is sent to it (and counts it).
	BlackHoleCluster = "BlackHoleCluster"
)

// DNSMetadataKey is the outbound listener's filter_metadata key carrying the
// name table of the sidecar's scope for its DNS proxy:
// {"domain": "<trustDomain>", "hosts": {"<svc>.<ns>.svc.<domain>": ["240.240.0.1", ...]}}.
const DNSMetadataKey = "weft.dns"

// Bounds the sidecar's decoder puts on what gen sends (sidecar/dataplane and
// sidecar/xdsresource hold the same numbers); gen refuses to build past them,
// with an error naming the namespace, rather than send what every sidecar of
// the namespace would NACK.
const (
	MaxDNSHosts             = 16384   // dataplane.MaxDNSHosts
	MaxDNSAddrsPerHost      = 16      // dataplane.MaxDNSAddrsPerHost
	MaxChainPrefixRanges    = 1 << 16 // xdsresource.MaxPrefixRanges, one filter chain
	MaxListenerPrefixRanges = 1 << 17 // xdsresource.MaxListenerPrefixRanges, one listener
)

// passthroughConnectTimeout is PassthroughCluster's connect timeout (Istio's
// default connectTimeout, as for every other cluster here).
const passthroughConnectTimeout = ir.DefaultConnectTimeout

// explicitOnly is the prefix range of a chain whose services have no VIPs:
// the outbound listener's own address. An intercepted connection never has a
// loopback destination, so such a chain serves only apps that address the
// sidecar explicitly (which pick chains by port alone) and never takes
// intercepted traffic to a port away from the default chain.
var explicitOnly = netip.PrefixFrom(netip.MustParseAddr(OutboundAddress), 32)

// vipPrefixes are addrs as host prefixes (/32, /128), sorted and unique.
func vipPrefixes(addrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue // compile only puts literals here
		}
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}

func cidrRanges(ps []netip.Prefix) []*corev3.CidrRange {
	out := make([]*corev3.CidrRange, len(ps))
	for i, p := range ps {
		out[i] = &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
	}
	return out
}

// vipMatch matches port P at one of prefixes.
func vipMatch(port uint32, prefixes []netip.Prefix) *listenerv3.FilterChainMatch {
	return &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port), PrefixRanges: cidrRanges(prefixes)}
}

// vipDomains are the Host header forms of svc's VIPs on port: "VIP" and
// "VIP:port" ("[v6]" and "[v6]:port" for IPv6, as a Host header writes them).
func vipDomains(svc *ir.Service, port uint32) []string {
	out := make([]string, 0, 2*len(svc.Addresses))
	for _, a := range svc.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		host := a
		if ip.Is6() {
			host = "[" + a + "]"
		}
		out = append(out, host, netip.AddrPortFrom(ip, uint16(port)).String())
	}
	return out
}

// defaultChain is the outbound listener's default_filter_chain: a connection
// no chain matches (its destination is not a mesh VIP:port) goes through to
// its original destination (ALLOW_ANY) or is closed (REGISTRY_ONLY).
func defaultChain(policy string) *listenerv3.FilterChain {
	if policy == ir.OutboundRegistryOnly {
		return &listenerv3.FilterChain{Name: "BlackHoleFilterChain", Filters: []*listenerv3.Filter{tcpProxy(BlackHoleCluster, BlackHoleCluster)}}
	}
	return &listenerv3.FilterChain{Name: "PassthroughFilterChain", Filters: []*listenerv3.Filter{tcpProxy(PassthroughCluster, PassthroughCluster)}}
}

// passthroughResources are passthroughClusters marshalled once: every
// sidecar's snapshot shares them (immutable, like every snapshot.Resource).
var passthroughResources = sync.OnceValues(func() ([]snapshot.Resource, error) {
	var out []snapshot.Resource
	for _, cl := range passthroughClusters() {
		r, err := snapshot.NewResource(snapshot.ClusterType, cl.Name, cl)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
})

// passthroughClusters are the two clusters every sidecar gets for non-mesh
// destinations. The sidecar refuses an ORIGINAL_DST cluster with endpoints,
// outlier detection or a transport socket; none is set.
func passthroughClusters() []*clusterv3.Cluster {
	return []*clusterv3.Cluster{
		{
			Name:                 PassthroughCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
			LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
			ConnectTimeout:       durationpb.New(passthroughConnectTimeout),
		},
		{
			Name:                 BlackHoleCluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			ConnectTimeout:       durationpb.New(passthroughConnectTimeout),
		},
	}
}

// dnsMetadata is the name table of a scope: every Service in it with
// addresses, by lower-case FQDN, within the sidecar's bounds.
func dnsMetadata(ns, domain string, scope []*ir.Service) (*corev3.Metadata, error) {
	hosts := map[string]*structpb.Value{}
	for _, svc := range scope {
		if len(svc.Addresses) == 0 {
			continue
		}
		if len(svc.Addresses) > MaxDNSAddrsPerHost {
			return nil, fmt.Errorf("outbound listener of namespace %s: DNS name %s has %d addresses, limit %d", ns, svc.Host, len(svc.Addresses), MaxDNSAddrsPerHost)
		}
		vals := make([]*structpb.Value, len(svc.Addresses))
		for i, a := range svc.Addresses {
			vals[i] = structpb.NewStringValue(a)
		}
		hosts[lower(svc.Host)] = structpb.NewListValue(&structpb.ListValue{Values: vals})
	}
	if len(hosts) > MaxDNSHosts {
		return nil, fmt.Errorf("outbound listener of namespace %s: %d DNS names in scope, limit %d", ns, len(hosts), MaxDNSHosts)
	}
	st := &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain": structpb.NewStringValue(lower(domain)),
		"hosts":  structpb.NewStructValue(&structpb.Struct{Fields: hosts}),
	}}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{DNSMetadataKey: st}}, nil
}

// lower is ASCII lower case (names are DNS-1123 already; the table's keys
// are lower case by contract).
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// checkPrefixBounds keeps a listener's chains within the sidecar's bounds on
// prefix ranges.
func checkPrefixBounds(ns string, chains []*listenerv3.FilterChain) error {
	total := 0
	for _, fc := range chains {
		n := len(fc.GetFilterChainMatch().GetPrefixRanges())
		if n > MaxChainPrefixRanges {
			return fmt.Errorf("outbound listener of namespace %s: chain %s has %d VIPs, limit %d", ns, fc.GetName(), n, MaxChainPrefixRanges)
		}
		if total += n; total > MaxListenerPrefixRanges {
			return fmt.Errorf("outbound listener of namespace %s: %d VIPs in its chains, limit %d", ns, total, MaxListenerPrefixRanges)
		}
	}
	return nil
}

// tcpChainName is the chain of TCP service svc on port:
// "outbound|<port>|tcp|<svc>.<ns>".
func tcpChainName(port uint32, svc *ir.Service) string {
	return "outbound|" + strconv.FormatUint(uint64(port), 10) + "|tcp|" + svc.Name + "." + svc.Namespace
}
