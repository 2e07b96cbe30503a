package gen

import (
	"strconv"
	"testing"

	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestLoadAssignmentGroupMetadata: a group's "weft" metadata is the tuple
// most of its endpoints share, written once on the LocalityLbEndpoints; only
// endpoints that differ carry their own; the sidecar's decoder reads every
// endpoint's peer and mtls back as the ir said, and weight 1 is left unset.
func TestLoadAssignmentGroupMetadata(t *testing.T) {
	sc := func(addr string) ir.Endpoint {
		return ir.Endpoint{Address: addr, Port: 15006, Namespace: "shop", ServiceAccount: "reviews", Weight: 1, Sidecar: true, MTLS: true}
	}
	static := ir.Endpoint{Address: "10.0.0.9", Port: 8080, Namespace: "shop", ServiceAccount: "legacy", Weight: 3}
	other := ir.Locality{Region: "eu"}
	c := &ir.Cluster{Name: "outbound|9080||reviews.shop.svc.cluster.local", Endpoints: []ir.Endpoint{
		sc("10.0.0.1"), static, sc("10.0.0.2"),
		{Address: "10.0.1.1", Port: 8080, Namespace: "shop", ServiceAccount: "legacy", Weight: 1, Locality: other},
	}}
	cla := loadAssignment(c)
	if n := len(cla.Endpoints); n != 2 {
		t.Fatalf("%d locality groups, want 2", n)
	}
	g := cla.Endpoints[0]
	if got := g.GetMetadata().GetFilterMetadata()[EndpointMetadataKey].GetFields()[EndpointPeerField].GetStringValue(); got != EndpointPeerSidecar {
		t.Errorf("group 0 peer = %q, want the sidecars' tuple", got)
	}
	if g.GetLoadBalancingWeight().GetValue() != 5 {
		t.Errorf("group 0 weight = %d, want 5 (1+3+1)", g.GetLoadBalancingWeight().GetValue())
	}
	for i, lb := range g.LbEndpoints {
		own := lb.GetMetadata() != nil
		if want := i == 1; own != want {
			t.Errorf("group 0 endpoint %d has own metadata: %v, want %v", i, own, want)
		}
		if want := i == 1; (lb.GetLoadBalancingWeight() != nil) != want {
			t.Errorf("group 0 endpoint %d weight %v, want set only for weight 3", i, lb.GetLoadBalancingWeight())
		}
	}
	if cla.Endpoints[1].LbEndpoints[0].GetMetadata() != nil {
		t.Error("a one-endpoint group's endpoint carries its own metadata")
	}
	a, err := anypb.New(cla)
	if err != nil {
		t.Fatal(err)
	}
	_, v, err := xdsresource.Decode(xdsresource.EndpointType, a)
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*xdsresource.Endpoints).Endpoints
	if len(got) != len(c.Endpoints) {
		t.Fatalf("decoded %d endpoints, want %d", len(got), len(c.Endpoints))
	}
	for i, ep := range c.Endpoints {
		if got[i].Peer != ep.Sidecar || got[i].MTLS != ep.MTLS {
			t.Errorf("endpoint %d (%s): Peer, MTLS = %v, %v; want %v, %v", i, ep.Address, got[i].Peer, got[i].MTLS, ep.Sidecar, ep.MTLS)
		}
	}
	// The size this is for: 2,000 sidecar endpoints of one Service.
	big := &ir.Cluster{Name: c.Name}
	for i := range 2000 {
		big.Endpoints = append(big.Endpoints, sc("10.1."+strconv.Itoa(i/250)+"."+strconv.Itoa(i%250)))
	}
	n := proto.Size(loadAssignment(big))
	t.Logf("2,000-endpoint assignment: %d bytes", n)
	if n > 50_000 {
		t.Errorf("2,000-endpoint assignment is %d bytes, want <= 50,000 (identity once per group)", n)
	}
}
