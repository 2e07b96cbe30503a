//lint:file-ignore SA1019 deprecated Envoy fields are still sent by peers; decoding them is deliberate.

package xdsresource

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// Endpoint metadata marking a peer sidecar's inbound listener (pilot's gen
// writes it; any other value or type means "not a peer").
const (
	endpointMetadataKey = "weft"
	peerField           = "peer"
	peerSidecar         = "sidecar"
)

func isPeer(lb *endpointv3.LbEndpoint) bool {
	return lb.GetMetadata().GetFilterMetadata()[endpointMetadataKey].GetFields()[peerField].GetStringValue() == peerSidecar
}

func decodeCluster(m *clusterv3.Cluster) (*Cluster, error) {
	e := errs{kind: "cluster", name: m.GetName()}
	if err := checkName(e, "name", m.GetName()); err != nil {
		return nil, err
	}
	c := &Cluster{Name: m.GetName()}
	switch m.GetType() {
	case clusterv3.Cluster_EDS:
		c.EDSName = m.GetEdsClusterConfig().GetServiceName()
		if c.EDSName == "" {
			c.EDSName = m.GetName() // Envoy: the cluster name is the EDS name by default
		}
		if len(c.EDSName) > MaxNameBytes {
			return nil, e.at("eds_cluster_config.service_name", "is %d bytes, limit %d", len(c.EDSName), MaxNameBytes)
		}
	case clusterv3.Cluster_STATIC:
		la := m.GetLoadAssignment()
		if la == nil {
			return nil, e.at("load_assignment", "required for a STATIC cluster")
		}
		eps, err := decodeAssignment(e, "load_assignment.", la)
		if err != nil {
			return nil, err
		}
		eps.Name = m.GetName()
		c.Static = eps
	default:
		return nil, e.at("type", "unsupported discovery type %s (want EDS or STATIC)", m.GetType())
	}
	ct, err := duration(e, "connect_timeout", m.GetConnectTimeout(), 5e9) // Envoy's default
	if err != nil {
		return nil, err
	}
	if ct == 0 {
		return nil, e.at("connect_timeout", "must be positive")
	}
	c.ConnectTimeout = ct
	switch m.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN:
		c.LB = RoundRobin
	case clusterv3.Cluster_LEAST_REQUEST:
		c.LB = LeastRequest
	case clusterv3.Cluster_RANDOM:
		c.LB = Random
	case clusterv3.Cluster_RING_HASH:
		c.LB = RingHash
		c.RingMin, c.RingMax = 1024, 8*1024*1024
		if rh := m.GetRingHashLbConfig(); rh != nil {
			if v := rh.GetMinimumRingSize(); v != nil {
				c.RingMin = v.GetValue()
			}
			if v := rh.GetMaximumRingSize(); v != nil {
				c.RingMax = v.GetValue()
			}
		}
		if c.RingMax > MaxRingSize {
			c.RingMax = MaxRingSize // Envoy caps too; a bigger ring buys nothing here
		}
		if c.RingMin == 0 || c.RingMin > c.RingMax {
			return nil, e.at("ring_hash_lb_config.minimum_ring_size", "must be 1..%d, got %d", c.RingMax, c.RingMin)
		}
	default:
		return nil, e.at("lb_policy", "unsupported %s", m.GetLbPolicy())
	}
	c.Limits = DefaultThresholds
	for i, t := range m.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue
		}
		f := fmt.Sprintf("circuit_breakers.thresholds[%d]", i)
		for _, s := range []struct {
			dst  *uint32
			v    *wrapperspb.UInt32Value
			name string
		}{
			{&c.Limits.MaxConnections, t.GetMaxConnections(), "max_connections"},
			{&c.Limits.MaxPendingRequests, t.GetMaxPendingRequests(), "max_pending_requests"},
			{&c.Limits.MaxRequests, t.GetMaxRequests(), "max_requests"},
		} {
			if s.v == nil {
				continue
			}
			if s.v.GetValue() == 0 {
				return nil, e.at(f+"."+s.name, "must be positive")
			}
			*s.dst = s.v.GetValue()
		}
		if t.GetMaxRetries() != nil {
			c.Limits.MaxRetries = t.GetMaxRetries().GetValue() // 0 is legal: no retries
		}
	}
	if od := m.GetOutlierDetection(); od != nil {
		o := &Outlier{Consecutive5xx: 5, ConsecutiveGatewayError: 0, MaxEjectionPercent: 10}
		if v := od.GetConsecutive_5Xx(); v != nil {
			o.Consecutive5xx = v.GetValue()
		}
		if v := od.GetConsecutiveGatewayFailure(); v != nil {
			o.ConsecutiveGatewayError = v.GetValue()
		}
		if v := od.GetMaxEjectionPercent(); v != nil {
			if v.GetValue() > 100 {
				return nil, e.at("outlier_detection.max_ejection_percent", "must be 0..100, got %d", v.GetValue())
			}
			o.MaxEjectionPercent = v.GetValue()
		}
		if o.Interval, err = duration(e, "outlier_detection.interval", od.GetInterval(), 10e9); err != nil {
			return nil, err
		}
		if o.BaseEjectionTime, err = duration(e, "outlier_detection.base_ejection_time", od.GetBaseEjectionTime(), 30e9); err != nil {
			return nil, err
		}
		c.Outlier = o
	}
	if m.GetHttp2ProtocolOptions() != nil {
		c.HTTP2 = true
	}
	if a, ok := m.GetTypedExtensionProtocolOptions()[httpOptionsKey]; ok {
		o := &httpv3.HttpProtocolOptions{}
		if err := a.UnmarshalTo(o); err != nil {
			return nil, e.at("typed_extension_protocol_options[\""+httpOptionsKey+"\"]", "malformed: %v", err)
		}
		if ex := o.GetExplicitHttpConfig(); ex != nil {
			switch {
			case ex.GetHttp2ProtocolOptions() != nil:
				c.HTTP2 = true
			case ex.GetHttp3ProtocolOptions() != nil:
				return nil, e.at("typed_extension_protocol_options[\""+httpOptionsKey+"\"].explicit_http_config", "HTTP/3 is not supported")
			}
		}
	}
	if m.GetTransportSocket() != nil {
		return nil, e.at("transport_socket", "TLS is not supported yet")
	}
	return c, nil
}

func decodeEndpoints(m *endpointv3.ClusterLoadAssignment) (*Endpoints, error) {
	e := errs{kind: "endpoints", name: m.GetClusterName()}
	if err := checkName(e, "cluster_name", m.GetClusterName()); err != nil {
		return nil, err
	}
	eps, err := decodeAssignment(e, "", m)
	if err != nil {
		return nil, err
	}
	eps.Name = m.GetClusterName()
	return eps, nil
}

func decodeAssignment(e errs, prefix string, m *endpointv3.ClusterLoadAssignment) (*Endpoints, error) {
	out := &Endpoints{}
	total := 0
	for i, le := range m.GetEndpoints() {
		total += len(le.GetLbEndpoints())
		if total > MaxEndpoints {
			return nil, e.at(fmt.Sprintf("%sendpoints[%d].lb_endpoints", prefix, i), "more than %d endpoints in total", MaxEndpoints)
		}
	}
	out.Endpoints = make([]Endpoint, 0, total)
	for i, le := range m.GetEndpoints() {
		f := fmt.Sprintf("%sendpoints[%d]", prefix, i)
		lw := uint32(1)
		if w := le.GetLoadBalancingWeight(); w != nil {
			if w.GetValue() == 0 || w.GetValue() > 1<<16 {
				return nil, e.at(f+".load_balancing_weight", "must be 1..65536, got %d", w.GetValue())
			}
			lw = w.GetValue()
		}
		loc := ""
		if l := le.GetLocality(); l != nil {
			loc = l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
		}
		for j, lb := range le.GetLbEndpoints() {
			ef := fmt.Sprintf("%s.lb_endpoints[%d]", f, j)
			ap, err := socketAddr(e, ef+".endpoint.address.socket_address", lb.GetEndpoint().GetAddress())
			if err != nil {
				return nil, err
			}
			w := uint32(1)
			if v := lb.GetLoadBalancingWeight(); v != nil {
				if v.GetValue() == 0 || v.GetValue() > 1<<16 {
					return nil, e.at(ef+".load_balancing_weight", "must be 1..65536, got %d", v.GetValue())
				}
				w = v.GetValue()
			}
			h := lb.GetHealthStatus()
			out.Endpoints = append(out.Endpoints, Endpoint{
				Addr:     ap,
				Weight:   w * lw,
				Healthy:  h == corev3.HealthStatus_UNKNOWN || h == corev3.HealthStatus_HEALTHY || h == corev3.HealthStatus_DEGRADED,
				Priority: le.GetPriority(),
				Locality: loc,
				Peer:     isPeer(lb),
			})
		}
	}
	return out, nil
}
