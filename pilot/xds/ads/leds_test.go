package ads

import (
	"fmt"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/bootstrap/leds"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/gen"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

const lbeds = snapshot.LbEndpointType

// ledsMesh is gen's snapshot for a LEDS sidecar of a mesh where Service big
// has n static endpoints 10.0.0.<i>; moved replaces endpoint 7's address by
// 10.0.1.7 (one endpoint change, same count).
func ledsMesh(t *testing.T, rev int64, n int, moved bool) *snapshot.Snapshot {
	t.Helper()
	var y strings.Builder
	y.WriteString(`apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: big, namespace: shop}
spec:
  selector: {app: big}
  ports: [{name: http, port: 80, targetPort: 8080}]
`)
	for i := range n {
		addr := fmt.Sprintf("10.0.0.%d", i+1)
		if moved && i == 6 {
			addr = "10.0.1.7"
		}
		fmt.Fprintf(&y, "---\napiVersion: mesh.weft.dev/v1alpha1\nkind: Workload\nmetadata: {name: w%d, namespace: shop, labels: {app: big}}\nspec: {address: %s, serviceAccount: big}\n", i, addr)
	}
	objs, err := resource.Decode([]byte(y.String()), "leds mesh")
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := compile.Compile(compile.Input{Revision: rev, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	s, err := gen.Proxy(mesh, &node.Node{ID: "client", Namespace: "shop", ServiceAccount: "c", Address: "10.9.0.1", Labels: map[string]string{"app": "client"}, LEDS: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// One endpoint change reaches a LEDS stream as one LEDS response holding
// exactly the new LbEndpoint and naming the old one removed; the assignment
// (same count, same weight) and every other type are not sent.
func TestDeltaLEDSOneEndpointChange(t *testing.T) {
	e := start(t, nil)
	s1 := ledsMesh(t, 1, 50, false)
	if n := len(s1.Resources[lbeds]); n != 50 {
		t.Fatalf("%d LbEndpoints generated, want 50", n)
	}
	e.src.publish(s1)
	c := e.delta(t)
	for i, typ := range []string{cds, eds, lbeds, lds, rds} {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: []string{"*"}}
		if i == 0 {
			req.Node = nodeProto("n1")
		}
		c.send(req)
	}
	for range 5 {
		r := c.recv()
		if r.TypeUrl == lbeds && len(r.Resources) != 50 {
			t.Fatalf("initial LEDS response has %d resources, want 50", len(r.Resources))
		}
		c.ack(r)
	}
	s2 := ledsMesh(t, 2, 50, true)
	e.src.publish(s2)
	coll := leds.Collection("outbound|80||big.shop.svc.cluster.local", "", "", "")
	added, removed := leds.Endpoint(coll, "10.0.1.7:8080"), leds.Endpoint(coll, "10.0.0.7:8080")
	r := c.recv()
	want := deltaView{Type: "LEDS", Nonce: "6", Res: map[string]string{added: ver(s2, lbeds, added)}, Removed: []string{removed}}
	if d := cmp.Diff(want, viewDelta(r)); d != "" {
		t.Fatalf("one endpoint change (-want +got):\n%s", d)
	}
	if b := len(r.Resources[0].GetResource().GetValue()); b > 64 {
		t.Errorf("the LbEndpoint is %d bytes", b)
	}
	c.ack(r)
	// Nothing else was sent for that change: the next response is the next
	// change's (endpoint 7 back: the same pair the other way round).
	s3 := ledsMesh(t, 3, 50, false)
	e.src.publish(s3)
	want = deltaView{Type: "LEDS", Nonce: "7", Res: map[string]string{removed: ver(s3, lbeds, removed)}, Removed: []string{added}}
	if d := cmp.Diff(want, viewDelta(c.recv())); d != "" {
		t.Fatalf("the next change (-want +got):\n%s", d)
	}
	// A count change also resends the (small) assignment, whose locality
	// weight is the count, before the LbEndpoints.
	s4 := ledsMesh(t, 4, 51, false)
	e.src.publish(s4)
	got := []deltaView{viewDelta(c.recv()), viewDelta(c.recv())}
	w51 := leds.Endpoint(coll, "10.0.0.51:8080")
	wantSeq := []deltaView{
		{Type: "EDS", Nonce: "8", Res: map[string]string{"outbound|80||big.shop.svc.cluster.local": ver(s4, eds, "outbound|80||big.shop.svc.cluster.local")}},
		{Type: "LEDS", Nonce: "9", Res: map[string]string{w51: ver(s4, lbeds, w51)}},
	}
	if d := cmp.Diff(wantSeq, got); d != "" {
		t.Fatalf("one endpoint added (-want +got):\n%s", d)
	}
}

// A SotW stream of a LEDS node gets the whole LbEndpoint set, each wrapped
// in a discovery Resource naming it (the body has no name), and a removal
// as a smaller whole set.
func TestSotWLEDSWrapped(t *testing.T) {
	e := start(t, nil)
	s1 := ledsMesh(t, 1, 3, false)
	e.src.publish(s1)
	c := e.sotw(t)
	c.send(&discoveryv3.DiscoveryRequest{Node: nodeProto("n1"), TypeUrl: lbeds, ResourceNames: []string{"*"}})
	names := func(r *discoveryv3.DiscoveryResponse) []string {
		var out []string
		for _, a := range r.Resources {
			var w discoveryv3.Resource
			if a.GetTypeUrl() != "type.googleapis.com/envoy.service.discovery.v3.Resource" || a.UnmarshalTo(&w) != nil {
				t.Fatalf("resource of type %s, want a discovery Resource", a.GetTypeUrl())
			}
			if w.GetResource().GetTypeUrl() != lbeds || w.GetVersion() != ver(s1, lbeds, w.GetName()) && w.GetVersion() != "" {
				t.Fatalf("wrapped %s %q version %q", w.GetResource().GetTypeUrl(), w.GetName(), w.GetVersion())
			}
			out = append(out, strings.TrimPrefix(w.GetName(), strings.TrimSuffix(leds.Collection("outbound|80||big.shop.svc.cluster.local", "", "", ""), "*")))
		}
		return out
	}
	r := c.recv()
	if d := cmp.Diff([]string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}, names(r)); d != "" {
		t.Fatalf("initial (-want +got):\n%s", d)
	}
	c.ack(r, "*")
	e.src.publish(ledsMesh(t, 2, 2, false))
	if d := cmp.Diff([]string{"10.0.0.1:8080", "10.0.0.2:8080"}, names(c.recv())); d != "" {
		t.Fatalf("after a removal (-want +got):\n%s", d)
	}
}
