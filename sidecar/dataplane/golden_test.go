package dataplane_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3" // in gen's inbound listeners
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/mtls/mtlstest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// goldenTypes maps the short type names of pilot's gen goldens to what the
// sidecar decodes them as.
var goldenTypes = map[string]struct {
	url string
	new func() proto.Message
}{
	"Cluster":               {xdsresource.ClusterType, func() proto.Message { return &clusterv3.Cluster{} }},
	"ClusterLoadAssignment": {xdsresource.EndpointType, func() proto.Message { return &endpointv3.ClusterLoadAssignment{} }},
	"Listener":              {xdsresource.ListenerType, func() proto.Message { return &listenerv3.Listener{} }},
	"RouteConfiguration":    {xdsresource.RouteType, func() proto.Message { return &routev3.RouteConfiguration{} }},
	"Policy":                {xdsresource.StalenessType, func() proto.Message { return &stalenesspb.Policy{} }},
}

// TestGenGoldensCompile decodes every Weft sidecar snapshot in pilot's gen
// goldens (what gen emits, TLS chains, transport sockets and RBAC included)
// with the sidecar's decoders and compiles it with a ROOTCA secret (which
// pilot's publisher adds per push): the wire shapes agree from this side too.
func TestGenGoldensCompile(t *testing.T) {
	ca := mtlstest.NewCA(t, "root")
	rootCA := dt.RootCA(ca.RootPEM(), ca.CRLPEM(t, 1, time.Now().Add(-time.Minute), time.Hour))
	sidecars, withTLS := 0, 0
	for _, g := range dt.GenGoldens(t, "../../pilot/xds/gen/testdata/*.golden.yaml") {
		f, id, types := g.File, g.Proxy, g.Types
		ls := types["Listener"]
		if _, ok := ls["outbound"]; !ok {
			if _, ok := ls["inbound"]; !ok {
				continue // a proxyless gRPC node: not a sidecar's snapshot
			}
		}
		sidecars++
		r := dt.Resources{}
		lbEndpoints := map[string]any{} // LEDS: named by their wrapper, not their body
		for name, raw := range types["LbEndpoint"] {
			m := &endpointv3.LbEndpoint{}
			if err := protojson.Unmarshal(raw, m); err != nil {
				t.Fatalf("%s %s LbEndpoint %s: %v", f, id, name, err)
			}
			_, v, err := xdsresource.Decode(xdsresource.LbEndpointType, dt.Any(m))
			if err != nil {
				t.Fatalf("%s %s LbEndpoint %s: %v", f, id, name, err)
			}
			lbEndpoints[name] = v
		}
		for short, set := range types {
			if short == "LbEndpoint" {
				continue
			}
			gt, ok := goldenTypes[short]
			if !ok {
				t.Fatalf("%s %s: type %s unknown to this test", f, id, short)
			}
			for name, raw := range set {
				m := gt.new()
				if err := protojson.Unmarshal(raw, m); err != nil {
					t.Fatalf("%s %s %s %s: %v", f, id, short, name, err)
				}
				r.Add(gt.url, m)
			}
		}
		r.Add(xdsresource.SecretType, rootCA)
		st, err := r.State()
		if err != nil {
			t.Fatalf("%s %s: %v", f, id, err)
		}
		st[xdsresource.LbEndpointType] = lbEndpoints
		cfg, err := dataplane.CompileWith(st, dataplane.Options{})
		if err != nil {
			t.Errorf("%s %s: %v", filepath.Base(f), id, err)
			continue
		}
		if cfg.NeedsMTLS() {
			withTLS++
		}
		if strings.Contains(string(types["Listener"]["inbound"]), "DownstreamTlsContext") && !cfg.NeedsMTLS() {
			t.Errorf("%s %s: TLS chains compiled without needing mTLS", filepath.Base(f), id)
		}
	}
	if sidecars == 0 || withTLS == 0 {
		t.Fatalf("%d sidecar snapshots, %d with mTLS: the goldens have none to check", sidecars, withTLS)
	}
	t.Logf("%d sidecar snapshots decoded and compiled, %d with mTLS", sidecars, withTLS)
}
