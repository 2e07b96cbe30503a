package gen

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
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
func loadAssignment(c *ir.Cluster) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
	var cur *endpointv3.LocalityLbEndpoints
	var curLoc ir.Locality
	var sum uint32
	for i, ep := range c.Endpoints {
		if i == 0 || ep.Locality != curLoc {
			cur = &endpointv3.LocalityLbEndpoints{
				Locality: &corev3.Locality{Region: ep.Locality.Region, Zone: ep.Locality.Zone, SubZone: ep.Locality.SubZone},
			}
			cla.Endpoints = append(cla.Endpoints, cur)
			curLoc, sum = ep.Locality, 0
		}
		w := max(ep.Weight, 1)
		sum += w
		cur.LoadBalancingWeight = wrapperspb.UInt32(sum)
		fields := map[string]*structpb.Value{
			"namespace":      structpb.NewStringValue(ep.Namespace),
			"serviceAccount": structpb.NewStringValue(ep.ServiceAccount),
		}
		if ep.Sidecar {
			fields[EndpointPeerField] = structpb.NewStringValue(EndpointPeerSidecar)
		}
		if ep.MTLS {
			fields[EndpointMTLSField] = structpb.NewStringValue("true")
		}
		cur.LbEndpoints = append(cur.LbEndpoints, lbEndpoint(ep.Address, ep.Port, w, health(ep.Health), &corev3.Metadata{
			FilterMetadata: map[string]*structpb.Struct{EndpointMetadataKey: {Fields: fields}},
		}))
	}
	return cla
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
