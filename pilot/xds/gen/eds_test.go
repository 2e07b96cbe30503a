package gen

import (
	"bytes"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"

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

// TestLEDSFormIsTheAssignment: for every golden input and proxy, the same
// node with LEDS gets the same snapshot but for its assignments, which are
// in LEDS form: each locality keeps its locality, weight, priority and
// metadata and names a collection holding exactly the LbEndpoints the plain
// assignment lists there (byte for byte); every other type is the same
// resources. The node without LEDS has no LbEndpoint type at all, and the
// two never share a scope.
func TestLEDSFormIsTheAssignment(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	checked := 0
	for _, in := range inputs {
		mesh, proxies := meshFromFile(t, in)
		for _, p := range proxies {
			if !p.Registers() {
				continue
			}
			plainNode, ledsNode := *p, *p
			plainNode.LEDS, ledsNode.LEDS = false, true
			if ScopeKey(&plainNode) == ScopeKey(&ledsNode) {
				t.Fatalf("%s: %s: LEDS and plain nodes share a scope key", in, p.ID)
			}
			plain, err := Proxy(mesh, &plainNode)
			if err != nil {
				t.Fatal(err)
			}
			ls, err := Proxy(mesh, &ledsNode)
			if err != nil {
				t.Fatal(err)
			}
			if err := Consistent(ls); err != nil {
				t.Errorf("%s: %s: LEDS snapshot not consistent: %v", in, p.ID, err)
			}
			validateAll(t, ls)
			if _, has := plain.Resources[snapshot.LbEndpointType]; has {
				t.Errorf("%s: %s: a node without LEDS gets LbEndpoints", in, p.ID)
			}
			if _, has := ls.Resources[snapshot.LbEndpointType]; !has {
				t.Errorf("%s: %s: a LEDS node has no LbEndpoint type", in, p.ID)
			}
			for typ := range plain.Resources {
				if typ != snapshot.EndpointType && plain.Version(typ) != ls.Version(typ) {
					t.Errorf("%s: %s: %s differs between the LEDS and plain snapshots", in, p.ID, typ)
				}
			}
			used := map[string]bool{}
			for name, r := range plain.Resources[snapshot.EndpointType] {
				want, got := &endpointv3.ClusterLoadAssignment{}, &endpointv3.ClusterLoadAssignment{}
				if err := r.Any.UnmarshalTo(want); err != nil {
					t.Fatal(err)
				}
				lr, ok := ls.Resources[snapshot.EndpointType][name]
				if !ok {
					t.Fatalf("%s: %s: LEDS snapshot lacks assignment %s", in, p.ID, name)
				}
				if err := lr.Any.UnmarshalTo(got); err != nil {
					t.Fatal(err)
				}
				if len(got.Endpoints) != len(want.Endpoints) {
					t.Fatalf("%s: %s: %d localities, want %d", in, name, len(got.Endpoints), len(want.Endpoints))
				}
				for i, wl := range want.Endpoints {
					gl := got.Endpoints[i]
					coll := gl.GetLedsClusterLocalityConfig().GetLedsCollectionName()
					if coll == "" || len(gl.LbEndpoints) != 0 || gl.GetLedsClusterLocalityConfig().GetLedsConfig().GetAds() == nil {
						t.Fatalf("%s: %s: locality %d is not in LEDS form: %v", in, name, i, gl)
					}
					members := map[string][]byte{}
					for en, er := range ls.Resources[snapshot.LbEndpointType] {
						if c, _ := leds.CollectionOf(en); c == coll {
							members[en] = er.Any.Value
							used[en] = true
						}
					}
					if len(members) != len(wl.LbEndpoints) {
						t.Errorf("%s: %s: locality %d: %d LbEndpoints, want %d", in, name, i, len(members), len(wl.LbEndpoints))
					}
					for _, lb := range wl.LbEndpoints {
						sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
						en := leds.Endpoint(coll, net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)))
						b, err := proto.MarshalOptions{Deterministic: true}.Marshal(lb)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(members[en], b) {
							t.Errorf("%s: %s: LbEndpoint %s is not the plain assignment's endpoint", in, name, en)
						}
					}
					wl.LbEndpoints, gl.LbConfig = nil, nil
					if !proto.Equal(wl, gl) {
						t.Errorf("%s: %s: locality %d differs beyond its endpoints:\n%v\n%v", in, name, i, wl, gl)
					}
				}
				checked++
			}
			if err := sidecarAccepts(ls); err != nil {
				t.Errorf("%s: %s: the sidecar refuses the LEDS snapshot: %v", in, p.ID, err)
			}
			if want, got := sidecarEndpoints(t, plain), sidecarEndpoints(t, ls); !cmp.Equal(want, got, cmpopts.EquateComparable(netip.AddrPort{})) {
				t.Errorf("%s: %s: the sidecar's endpoints differ (-plain +leds):\n%s", in, p.ID, cmp.Diff(want, got, cmpopts.EquateComparable(netip.AddrPort{})))
			}
			if len(used) != len(ls.Resources[snapshot.LbEndpointType]) {
				t.Errorf("%s: %s: %d LbEndpoints, %d in an assignment's collection", in, p.ID, len(ls.Resources[snapshot.LbEndpointType]), len(used))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no assignment checked")
	}
}

// sidecarEndpoints is what the sidecar makes of a snapshot's assignments
// (xdsresource.Decode, then ResolveLEDS), each assignment's endpoints sorted.
func sidecarEndpoints(t *testing.T, s *snapshot.Snapshot) map[string][]xdsresource.Endpoint {
	t.Helper()
	decode := func(typ string) map[string]any {
		out := map[string]any{}
		for name, r := range s.Resources[typ] {
			_, v, err := xdsresource.Decode(typ, r.Any)
			if err != nil {
				t.Fatalf("%s %s: %v", typ, name, err)
			}
			out[name] = v
		}
		return out
	}
	merged, err := xdsresource.ResolveLEDS(decode(snapshot.EndpointType), decode(snapshot.LbEndpointType))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]xdsresource.Endpoint{}
	for name, v := range merged {
		eps := slices.Clone(v.(*xdsresource.Endpoints).Endpoints)
		slices.SortFunc(eps, func(a, b xdsresource.Endpoint) int { return a.Addr.Compare(b.Addr) })
		out[name] = eps
	}
	return out
}
