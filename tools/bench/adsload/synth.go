package main

import (
	"fmt"
	"sort"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// synth stands in for compile+gen until they produce full output: it reads the
// Workload objects of the store (label app=<service>) and emits, per proxy, one
// EDS cluster and one ClusterLoadAssignment per service, one outbound listener and
// one route configuration with a virtual host per service. The model behind each
// *ir.Mesh is kept in a side table owned by synth.
type synth struct {
	mu     sync.Mutex
	models map[*ir.Mesh]map[string][]endpoint
}

type endpoint struct {
	addr   string
	weight uint32
}

func newSynth() *synth { return &synth{models: map[*ir.Mesh]map[string][]endpoint{}} }

func (s *synth) compile(in compile.Input) (*ir.Mesh, error) {
	m := map[string][]endpoint{}
	for _, o := range in.Objects {
		if o.Kind != resource.KindWorkload {
			continue
		}
		spec := o.Spec.(*resource.WorkloadSpec)
		svc := o.Metadata.Labels["app"]
		m[svc] = append(m[svc], endpoint{addr: spec.Address, weight: uint32(max(spec.Weight, 1))})
	}
	for _, eps := range m {
		sort.Slice(eps, func(i, j int) bool { return eps[i].addr < eps[j].addr })
	}
	mesh := &ir.Mesh{Revision: in.Revision}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep the last few meshes only: generation reads the newest.
	if len(s.models) > 8 {
		for k := range s.models {
			if k.Revision < in.Revision-4 {
				delete(s.models, k)
			}
		}
	}
	s.models[mesh] = m
	return mesh, nil
}

func clusterName(svc string) string {
	return fmt.Sprintf("outbound|80||%s.bench.svc.cluster.local", svc)
}

func (s *synth) generate(mesh *ir.Mesh, _ *node.Node) (*snapshot.Snapshot, error) {
	s.mu.Lock()
	m, ok := s.models[mesh]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("synth: no model for revision %d", mesh.Revision)
	}
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	msgs := map[string]map[string]proto.Message{
		snapshot.ClusterType: {}, snapshot.EndpointType: {}, snapshot.ListenerType: {}, snapshot.RouteType: {},
	}
	svcs := make([]string, 0, len(m))
	for svc := range m {
		svcs = append(svcs, svc)
	}
	sort.Strings(svcs)
	rc := &routev3.RouteConfiguration{Name: "outbound"}
	for _, svc := range svcs {
		name := clusterName(svc)
		msgs[snapshot.ClusterType][name] = &clusterv3.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads},
			ConnectTimeout:       durationpb.New(time.Second),
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		}
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
		lle := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "r1", Zone: "z1"}, LoadBalancingWeight: wrapperspb.UInt32(1)}
		for _, ep := range m[svc] {
			lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
					SocketAddress: &corev3.SocketAddress{Address: ep.addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}},
				LoadBalancingWeight: wrapperspb.UInt32(ep.weight),
			})
		}
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{lle}
		msgs[snapshot.EndpointType][name] = cla
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    svc,
			Domains: []string{svc, svc + ".bench", svc + ".bench.svc", svc + ".bench.svc.cluster.local"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}},
			}},
		})
	}
	msgs[snapshot.RouteType]["outbound"] = rc
	msgs[snapshot.ListenerType]["outbound"] = &listenerv3.Listener{Name: "outbound", Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 15001}}}}}
	return snapshot.New(mesh.Revision, msgs)
}
