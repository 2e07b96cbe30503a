package gen

import (
	"fmt"
	"net"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// EndpointMetadataKey is the LbEndpoint filter_metadata key carrying the
// endpoint's identity ({namespace, serviceAccount}) so a sidecar can check the
// peer's certificate against it, and, for a registered sidecar's inbound
// listener, EndpointPeerField: EndpointPeerSidecar.
const EndpointMetadataKey = "weft"

// EndpointPeerField set to EndpointPeerSidecar in an endpoint's "weft" metadata
// marks the address as a peer sidecar's inbound listener: a client sidecar
// speaks HTTP/2 (h2c until mTLS) to it, multiplexed, whatever the service's
// protocol. Static Workload endpoints carry no such field and are spoken to in
// the service's own protocol. Envoy and grpc-go ignore the field.
const (
	EndpointPeerField   = "peer"
	EndpointPeerSidecar = "sidecar"
)

// EndpointMTLSField set to "true" in an endpoint's "weft" metadata says the
// endpoint takes mTLS (ir.Endpoint.MTLS). A client sidecar uses TLS to an
// endpoint iff its cluster has a transport socket and the endpoint says so
// (Istio's auto-mTLS); absent means plaintext.
const EndpointMTLSField = "mtls"

// loadAssignment renders a cluster's endpoints grouped by locality (the ir keeps
// them sorted by locality). Every group has a Locality message and a non-zero
// load_balancing_weight (the sum of its endpoints' weights): grpc-go NACKs a
// group without locality and silently ignores one with weight 0. All groups are
// priority 0.
//
// The "weft" metadata (identity, peer, mtls) is written once per group, on
// the LocalityLbEndpoints, as the tuple most of its endpoints share; only an
// endpoint that differs carries its own complete "weft" metadata, which
// replaces the group's (no merging). A 2,000-endpoint assignment of one
// Service was 241 KB with the metadata on every endpoint and is about 45 KB
// this way, sent to every watcher on each endpoint change (issue #11). An
// endpoint weight of 1 is left unset for the same reason (the default).
func loadAssignment(c *ir.Cluster) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
	eachGroup(c.Endpoints, func(le *endpointv3.LocalityLbEndpoints, group []ir.Endpoint, common endpointMeta) {
		le.LbEndpoints = make([]*endpointv3.LbEndpoint, 0, len(group))
		for _, ep := range group {
			le.LbEndpoints = append(le.LbEndpoints, groupEndpoint(ep, common))
		}
		cla.Endpoints = append(cla.Endpoints, le)
	})
	return cla
}

// ledsAssignment is loadAssignment in LEDS form (bootstrap/leds), for a node
// with node.LEDS: every group keeps its locality, weight and metadata but
// names its collection instead of listing its endpoints, and each endpoint
// is returned apart, by resource name, as loadAssignment would have listed
// it. An endpoint change is then one LbEndpoint resource (and the small
// assignment when the group's weight changes), not the whole assignment.
func ledsAssignment(c *ir.Cluster) (*endpointv3.ClusterLoadAssignment, map[string]*endpointv3.LbEndpoint, error) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
	eps := make(map[string]*endpointv3.LbEndpoint, len(c.Endpoints))
	var err error
	eachGroup(c.Endpoints, func(le *endpointv3.LocalityLbEndpoints, group []ir.Endpoint, common endpointMeta) {
		loc := group[0].Locality
		coll := leds.Collection(c.Name, loc.Region, loc.Zone, loc.SubZone)
		le.LbConfig = &endpointv3.LocalityLbEndpoints_LedsClusterLocalityConfig{LedsClusterLocalityConfig: &endpointv3.LedsClusterLocalityConfig{
			LedsConfig: ads(), LedsCollectionName: coll}}
		for _, ep := range group {
			name := leds.Endpoint(coll, net.JoinHostPort(ep.Address, strconv.FormatUint(uint64(ep.Port), 10)))
			if _, dup := eps[name]; dup && err == nil {
				// compile de-duplicates a port's endpoints; this is a bug.
				err = fmt.Errorf("cluster %s: endpoint %s listed twice", c.Name, name)
			}
			eps[name] = groupEndpoint(ep, common)
		}
		cla.Endpoints = append(cla.Endpoints, le)
	})
	if err != nil {
		return nil, nil, err
	}
	return cla, eps, nil
}

// eachGroup calls f with each locality group of eps (the ir keeps them sorted
// by locality) and its LocalityLbEndpoints without endpoints: locality,
// weight and the group's metadata.
func eachGroup(eps []ir.Endpoint, f func(le *endpointv3.LocalityLbEndpoints, group []ir.Endpoint, common endpointMeta)) {
	for start := 0; start < len(eps); {
		end := start + 1
		for end < len(eps) && eps[end].Locality == eps[start].Locality {
			end++
		}
		group := eps[start:end]
		common := commonMeta(group)
		loc := group[0].Locality
		var sum uint32
		for _, ep := range group {
			sum += max(ep.Weight, 1)
		}
		f(&endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone},
			Metadata:            common.metadata(),
			LoadBalancingWeight: wrapperspb.UInt32(sum),
		}, group, common)
		start = end
	}
}

// groupEndpoint renders ep of a group whose common metadata is common: its
// own metadata only where it differs, a weight of 1 unset.
func groupEndpoint(ep ir.Endpoint, common endpointMeta) *endpointv3.LbEndpoint {
	w := max(ep.Weight, 1)
	var md *corev3.Metadata
	if m := metaOf(ep); m != common {
		md = m.metadata()
	}
	if w == 1 {
		w = 0
	}
	return lbEndpoint(ep.Address, ep.Port, w, health(ep.Health), md)
}

// endpointMeta is what an endpoint's "weft" metadata says.
type endpointMeta struct {
	namespace, serviceAccount string
	sidecar, mtls             bool
}

func metaOf(ep ir.Endpoint) endpointMeta {
	return endpointMeta{namespace: ep.Namespace, serviceAccount: ep.ServiceAccount, sidecar: ep.Sidecar, mtls: ep.MTLS}
}

// commonMeta is the tuple most endpoints of the group share (of equal
// counts, the one that reached it first: the ir's order is deterministic).
func commonMeta(group []ir.Endpoint) endpointMeta {
	counts := make(map[endpointMeta]int, 1)
	best, bestN := metaOf(group[0]), 0
	for _, ep := range group {
		m := metaOf(ep)
		counts[m]++
		if n := counts[m]; n > bestN {
			best, bestN = m, n
		}
	}
	return best
}

// metadata renders the tuple. An endpoint's own metadata replaces its group's
// as a whole, so an absent "peer" or "mtls" there means false.
func (m endpointMeta) metadata() *corev3.Metadata {
	fields := map[string]*structpb.Value{
		"namespace":      structpb.NewStringValue(m.namespace),
		"serviceAccount": structpb.NewStringValue(m.serviceAccount),
	}
	if m.sidecar {
		fields[EndpointPeerField] = structpb.NewStringValue(EndpointPeerSidecar)
	}
	if m.mtls {
		fields[EndpointMTLSField] = structpb.NewStringValue("true")
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{EndpointMetadataKey: {Fields: fields}}}
}

func health(h ir.Health) corev3.HealthStatus {
	if h == ir.HealthHealthy {
		return corev3.HealthStatus_HEALTHY
	}
	return corev3.HealthStatus_UNKNOWN
}

func socketAddress(addr string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       addr,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// lbEndpoint renders one endpoint; weight 0 leaves the weight unset (= 1).
func lbEndpoint(addr string, port, weight uint32, hs corev3.HealthStatus, md *corev3.Metadata) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{
		HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(addr, port)}},
		HealthStatus:        hs,
		LoadBalancingWeight: u32(weight),
		Metadata:            md,
	}
}
