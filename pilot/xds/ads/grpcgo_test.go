package ads

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/pilot/status"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/tools/testkit"
)

// A real, independent SotW client: grpc-go's xDS resolver and balancers dial
// xds:///svc through this server. It checks what grpc-go requires of a server
// (per-type nonces and versions, names it asks for, ACKs) with hand-made
// resources; the full pilot conformance test with gen output lives elsewhere.

func backend(t *testing.T, name string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	h := health.NewServer()
	h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

func grpcSnap(t *testing.T, rev int64, backendAddr string, filters bool) *snapshot.Snapshot {
	t.Helper()
	host, portS, _ := net.SplitHostPort(backendAddr)
	var port uint32
	fmt.Sscan(portS, &port)
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	hcm := &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: "route"}}}
	if filters {
		router, _ := anypb.New(&routerv3.Router{})
		hcm.HttpFilters = []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}}
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.New(rev, map[string]map[string]proto.Message{
		lds: {"svc": &listenerv3.Listener{Name: "svc", ApiListener: &listenerv3.ApiListener{ApiListener: hcmAny}}},
		rds: {"route": &routev3.RouteConfiguration{Name: "route", VirtualHosts: []*routev3.VirtualHost{{Name: "svc", Domains: []string{"svc"},
			Routes: []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "cluster"}}}}}}}}},
		cds: {"cluster": &clusterv3.Cluster{Name: "cluster", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads}, LbPolicy: clusterv3.Cluster_ROUND_ROBIN}},
		eds: {"cluster": &endpointv3.ClusterLoadAssignment{ClusterName: "cluster", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: &corev3.Locality{Zone: "z"}, LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGRPCGoClient(t *testing.T) {
	e := start(t, nil)
	b1, b2 := backend(t, "b1"), backend(t, "b2")
	e.src.publish(grpcSnap(t, 1, b1, true))

	lis := e.addr
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],
		"node":{"id":"grpc-client","locality":{"zone":"z"}}}`, lis)
	res, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///svc", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	// calls reach backend b: its health service knows the name b.
	reaches := func(name string) func() bool {
		return func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
		}
	}
	testkit.Eventually(t, 10*time.Second, "calls reach b1", reaches("b1"))
	synced := func(rev int64) func(status.ProxyStatus) bool {
		return func(ps status.ProxyStatus) bool {
			if ps.Status != status.Synced || ps.EffectiveRevision != rev || len(ps.Types) != 4 {
				return false
			}
			for _, ts := range ps.Types {
				if ts.Status != status.Synced {
					return false
				}
			}
			return true
		}
	}
	e.waitStatus(t, "grpc-client", "all four types SYNCED at 1", synced(1))

	// Endpoints move to b2.
	e.src.publish(grpcSnap(t, 2, b2, true))
	testkit.Eventually(t, 10*time.Second, "calls reach b2", reaches("b2"))
	e.waitStatus(t, "grpc-client", "SYNCED at 2", synced(2))

	// A listener grpc-go rejects (no HTTP filters): NACKED with its error, the
	// channel keeps working on the previous config, the next good one converges.
	e.src.publish(grpcSnap(t, 3, b2, false))
	ps := e.waitStatus(t, "grpc-client", "NACKED", func(ps status.ProxyStatus) bool { return ps.Status == status.Nacked })
	lt := typeStatus(ps, lds)
	if lt.Error == "" || ps.EffectiveRevision != 2 {
		t.Fatalf("LDS = %+v effective %d; want an error and effective revision 2", lt, ps.EffectiveRevision)
	}
	if !reaches("b2")() {
		t.Fatal("calls fail after a NACK; the previous config should still serve")
	}
	e.src.publish(grpcSnap(t, 4, b1, true))
	testkit.Eventually(t, 10*time.Second, "calls reach b1 again", reaches("b1"))
	ps = e.waitStatus(t, "grpc-client", "SYNCED at 4", synced(4))
	if lt := typeStatus(ps, lds); lt.Nonce == "" || lt.VersionRejected != "" {
		t.Fatalf("LDS after recovery = %+v", lt)
	}
}
