package xdsresource_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/bootstrap/leds"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const ledsCluster = "outbound|80||big.ns.svc.cluster.local"

var (
	collA = leds.Collection(ledsCluster, "eu", "a", "")
	collB = leds.Collection(ledsCluster, "eu", "b", "")
)

func weftMeta(fields map[string]string) *corev3.Metadata {
	f := map[string]*structpb.Value{}
	for k, v := range fields {
		f[k] = structpb.NewStringValue(v)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"weft": {Fields: f}}}
}

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func ledsLocality(coll, zone string, weight uint32, prio uint32) *endpointv3.LocalityLbEndpoints {
	return &endpointv3.LocalityLbEndpoints{
		Locality:            &corev3.Locality{Region: "eu", Zone: zone},
		LoadBalancingWeight: wrapperspb.UInt32(weight),
		Priority:            prio,
		Metadata:            weftMeta(map[string]string{"peer": "sidecar", "mtls": "true"}),
		LbConfig: &endpointv3.LocalityLbEndpoints_LedsClusterLocalityConfig{LedsClusterLocalityConfig: &endpointv3.LedsClusterLocalityConfig{
			LedsConfig: ads(), LedsCollectionName: coll}},
	}
}

func lbEndpoint(addr string, port uint32, weight uint32, md *corev3.Metadata) *endpointv3.LbEndpoint {
	ep := &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}},
		Metadata: md,
	}
	if weight != 0 {
		ep.LoadBalancingWeight = wrapperspb.UInt32(weight)
	}
	return ep
}

// decodeState decodes a CLA and LbEndpoints (name -> message) as the sidecar's
// xDS client holds them: LbEndpoints keyed by their wrapper's name.
func decodeState(t *testing.T, cla *endpointv3.ClusterLoadAssignment, eps map[string]*endpointv3.LbEndpoint) (assignments, lbEndpoints map[string]any) {
	t.Helper()
	name, v, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(cla))
	if err != nil {
		t.Fatalf("decode assignment: %v", err)
	}
	assignments = map[string]any{name: v}
	lbEndpoints = map[string]any{}
	for n, ep := range eps {
		got, v, err := xdsresource.Decode(xdsresource.LbEndpointType, dt.Any(ep))
		if err != nil {
			t.Fatalf("decode %s: %v", n, err)
		}
		if got != "" {
			t.Fatalf("an LbEndpoint decodes with name %q, want \"\" (its wrapper names it)", got)
		}
		lbEndpoints[n] = v
	}
	return assignments, lbEndpoints
}

// TestResolveLEDS: an assignment's LEDS localities get the LbEndpoints of
// their collections, in name order, weighted by endpoint × locality, with the
// group's metadata unless the endpoint has its own; an inline locality of the
// same assignment stays; an assignment without LEDS is returned as it is.
func TestResolveLEDS(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ledsCluster, Endpoints: []*endpointv3.LocalityLbEndpoints{
		ledsLocality(collA, "a", 3, 0),
		ledsLocality(collB, "b", 1, 1),
		{Locality: &corev3.Locality{Region: "us"}, LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.9.0.1", 80, 0, nil)}},
	}}
	eps := map[string]*endpointv3.LbEndpoint{
		leds.Endpoint(collA, "10.0.0.2:15006"): lbEndpoint("10.0.0.2", 15006, 0, nil),
		leds.Endpoint(collA, "10.0.0.1:8080"):  lbEndpoint("10.0.0.1", 8080, 2, weftMeta(map[string]string{"namespace": "ns"})),
		leds.Endpoint(collB, "10.0.1.1:15006"): lbEndpoint("10.0.1.1", 15006, 0, nil),
	}
	as, ls := decodeState(t, cla, eps)
	plain := &xdsresource.Endpoints{Name: "other"}
	as["other"] = plain
	got, err := xdsresource.ResolveLEDS(as, ls)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := []xdsresource.Endpoint{
		{Addr: ap("10.9.0.1:80"), Weight: 1, Healthy: true, Locality: "us//"},
		// collA in name order: "10.0.0.1:8080" < "10.0.0.2:15006"
		{Addr: ap("10.0.0.1:8080"), Weight: 6, Healthy: true, Locality: "eu/a/"}, // own metadata: not a peer, no mTLS
		{Addr: ap("10.0.0.2:15006"), Weight: 3, Healthy: true, Locality: "eu/a/", Peer: true, MTLS: true},
		{Addr: ap("10.0.1.1:15006"), Weight: 1, Healthy: true, Priority: 1, Locality: "eu/b/", Peer: true, MTLS: true},
	}
	m := got[ledsCluster].(*xdsresource.Endpoints)
	if diff := cmp.Diff(want, m.Endpoints, cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Errorf("merged endpoints (-want +got):\n%s", diff)
	}
	if len(m.LEDS) != 0 {
		t.Errorf("merged assignment keeps %d LEDS localities", len(m.LEDS))
	}
	if got["other"] != plain {
		t.Error("an assignment without LEDS was copied")
	}
	if orig := as[ledsCluster].(*xdsresource.Endpoints); len(orig.Endpoints) != 1 || len(orig.LEDS) != 2 {
		t.Errorf("the decoded (shared) assignment was changed: %+v", orig)
	}
	// An empty collection is an empty locality, not an error.
	as2, _ := decodeState(t, cla, nil)
	got, err = xdsresource.ResolveLEDS(as2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got[ledsCluster].(*xdsresource.Endpoints).Endpoints); n != 1 {
		t.Errorf("with no LbEndpoints: %d endpoints, want the inline 1", n)
	}
}

// Every LEDS refusal names the resource and what is wrong.
func TestLEDSRefusals(t *testing.T) {
	base := func() *endpointv3.ClusterLoadAssignment {
		return &endpointv3.ClusterLoadAssignment{ClusterName: ledsCluster, Endpoints: []*endpointv3.LocalityLbEndpoints{ledsLocality(collA, "a", 1, 0)}}
	}
	for _, tc := range []struct {
		name string
		edit func(*endpointv3.ClusterLoadAssignment)
		want string
	}{
		{"collection not xdstp", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints[0].GetLedsClusterLocalityConfig().LedsCollectionName = "big/*"
		}, `endpoints "outbound|80||big.ns.svc.cluster.local": endpoints[0].leds_cluster_locality_config.leds_collection_name: collection "big/*": want xdstp://`},
		{"collection without /*", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints[0].GetLedsClusterLocalityConfig().LedsCollectionName = strings.TrimSuffix(collA, "/*")
		}, "want an id and a trailing /*"},
		{"collection too long", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints[0].GetLedsClusterLocalityConfig().LedsCollectionName = leds.Collection(strings.Repeat("x", xdsresource.MaxNameBytes), "", "", "")
		}, "leds_collection_name: is 566 bytes, limit 512"},
		{"both inline and LEDS", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints[0].LbEndpoints = []*endpointv3.LbEndpoint{lbEndpoint("10.0.0.1", 80, 0, nil)}
		}, "endpoints[0]: both lb_endpoints and leds_cluster_locality_config"},
		{"not ads", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints[0].GetLedsClusterLocalityConfig().LedsConfig = &corev3.ConfigSource{}
		}, "leds_config: only ads is supported"},
		{"collection twice", func(c *endpointv3.ClusterLoadAssignment) {
			c.Endpoints = append(c.Endpoints, ledsLocality(collA, "b", 1, 0))
		}, "endpoints[1].leds_cluster_locality_config.leds_collection_name: collection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			_, _, err := xdsresource.Decode(xdsresource.EndpointType, dt.Any(c))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("LEDS in a STATIC cluster", func(t *testing.T) {
		c := &clusterv3.Cluster{Name: "s", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}, LoadAssignment: base()}
		_, _, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(c))
		if want := `cluster "s": load_assignment.endpoints[0].leds_cluster_locality_config: LEDS is only for an EDS assignment`; err == nil || err.Error() != want {
			t.Fatalf("Decode = %v, want %q", err, want)
		}
	})
	t.Run("bad LbEndpoint", func(t *testing.T) {
		_, _, err := xdsresource.Decode(xdsresource.LbEndpointType, dt.Any(lbEndpoint("nope", 80, 0, nil)))
		if want := `LbEndpoint: endpoint.address.socket_address.address: not an IP literal: "nope"`; err == nil || err.Error() != want {
			t.Fatalf("Decode = %v, want %q", err, want)
		}
		_, _, err = xdsresource.Decode(xdsresource.LbEndpointType, dt.Any(lbEndpoint("10.0.0.1", 80, 1<<16+1, nil)))
		if want := `LbEndpoint: load_balancing_weight: must be 1..65536, got 65537`; err == nil || err.Error() != want {
			t.Fatalf("Decode = %v, want %q", err, want)
		}
	})
	resolve := func(t *testing.T, eps map[string]*endpointv3.LbEndpoint) error {
		as, ls := decodeState(t, base(), eps)
		_, err := xdsresource.ResolveLEDS(as, ls)
		return err
	}
	ep := lbEndpoint("10.0.0.1", 80, 0, nil)
	for _, tc := range []struct {
		name, ep, want string
	}{
		{"orphan", leds.Endpoint(collB, "10.0.0.1:80"),
			fmt.Sprintf(`LbEndpoint %q: collection %q is named by no ClusterLoadAssignment`, leds.Endpoint(collB, "10.0.0.1:80"), collB)},
		{"not in a collection", "10.0.0.1:80", `LbEndpoint "10.0.0.1:80": name is not <xdstp collection>/<address:port>`},
		{"not xdstp", "dns://x/10.0.0.1:80", `LbEndpoint "dns://x/10.0.0.1:80": name is not <xdstp collection>/<address:port>`},
		{"nested collection", leds.Endpoint(collA, "x/10.0.0.1:80"), "is named by no ClusterLoadAssignment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := resolve(t, map[string]*endpointv3.LbEndpoint{leds.Endpoint(collA, "10.0.0.2:80"): ep, tc.ep: ep})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ResolveLEDS = %v, want %q", err, tc.want)
			}
		})
	}
}

// MaxEndpoints bounds an assignment with its collections, at the bound and
// one past it.
func TestLEDSMaxEndpoints(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: ledsCluster, Endpoints: []*endpointv3.LocalityLbEndpoints{ledsLocality(collA, "a", 1, 0),
		{LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.9.0.1", 80, 0, nil)}}}}
	as, _ := decodeState(t, cla, nil)
	ls := map[string]any{}
	_, v, err := xdsresource.Decode(xdsresource.LbEndpointType, dt.Any(lbEndpoint("10.0.0.1", 80, 0, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range xdsresource.MaxEndpoints - 1 {
		ls[leds.Endpoint(collA, fmt.Sprintf("10.%d.%d.%d:80", i>>16, i>>8&255, i&255))] = v
	}
	got, err := xdsresource.ResolveLEDS(as, ls)
	if err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if n := len(got[ledsCluster].(*xdsresource.Endpoints).Endpoints); n != xdsresource.MaxEndpoints {
		t.Fatalf("%d endpoints, want %d", n, xdsresource.MaxEndpoints)
	}
	ls[leds.Endpoint(collA, "10.255.255.255:80")] = v
	if _, err := xdsresource.ResolveLEDS(as, ls); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d endpoints", xdsresource.MaxEndpoints)) {
		t.Fatalf("one past the bound: %v", err)
	}
}
