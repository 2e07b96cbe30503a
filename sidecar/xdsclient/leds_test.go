package xdsclient

import (
	"context"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

const typeLbEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"

// ledsDecode is xdsresource's contract for an LbEndpoint: its body has no
// name, so Decode returns "" and the wrapper names it.
func ledsDecode(typeURL string, a *anypb.Any) (string, any, error) {
	if typeURL == typeLbEndpoint {
		var ep endpointv3.LbEndpoint
		if err := proto.Unmarshal(a.GetValue(), &ep); err != nil {
			return "", nil, err
		}
		return "", &ep, nil
	}
	return testDecode(typeURL, a)
}

func wrapped(t *testing.T, name string, body *anypb.Any) *anypb.Any {
	t.Helper()
	b, err := proto.Marshal(&xdswire.Resource{Name: name, Version: "1", Resource: body})
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: resourceWrapperType, Value: b}
}

// A resource whose body has no name takes its wrapper's: a discovery
// Resource in SotW (pilot wraps LbEndpoints so), the delta Resource itself.
// A wrapper without a name, or one whose body is named otherwise, is a NACK.
func TestUnnamedBodiesTakeTheWrappersName(t *testing.T) {
	ep := mustAny(t, &endpointv3.LbEndpoint{})
	newEng := func(mode Mode) *engine {
		cfg := testConfig(t, mode, &applier{})
		cfg.Types, cfg.Decode = []string{TypeCluster, typeLbEndpoint}, ledsDecode
		return newEngine(cfg.withDefaults())
	}
	for _, tc := range []struct {
		name string
		res  []*anypb.Any
		want string // NACK; "" for an ACK holding x/1 and x/2
	}{
		{"wrapped", []*anypb.Any{wrapped(t, "x/1", ep), wrapped(t, "x/2", ep)}, ""},
		{"unwrapped", []*anypb.Any{ep}, "type LbEndpoint: resource #0: empty name"},
		{"wrapper without a name", []*anypb.Any{wrapped(t, "", ep)}, "Resource wrapper without a name"},
		{"malformed wrapper", []*anypb.Any{{TypeUrl: resourceWrapperType, Value: []byte{0xff}}}, "malformed Resource wrapper"},
		{"wrapper of another type", []*anypb.Any{wrapped(t, "c", mustAny(t, cluster("c")))}, `resource c: type_url "type.googleapis.com/envoy.config.cluster.v3.Cluster" does not match`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEng(SotW)
			reqs := e.handleSotW(context.Background(), &xdswire.DiscoveryResponse{TypeUrl: typeLbEndpoint, VersionInfo: "v1", Nonce: "n1", Resources: tc.res})
			nack := reqs[0].GetErrorDetail().GetMessage()
			if tc.want != "" {
				if !strings.Contains(nack, tc.want) {
					t.Fatalf("NACK %q, want one containing %q", nack, tc.want)
				}
				return
			}
			if nack != "" {
				t.Fatalf("NACK %q", nack)
			}
			if got := e.state.Resources[typeLbEndpoint]; len(got) != 2 || got["x/1"].Value == nil || got["x/2"].Value == nil {
				t.Fatalf("held %v, want x/1 and x/2", got)
			}
		})
	}
	t.Run("wrapper names a named body otherwise", func(t *testing.T) {
		e := newEng(SotW)
		reqs := e.handleSotW(context.Background(), &xdswire.DiscoveryResponse{TypeUrl: TypeCluster, VersionInfo: "v1", Nonce: "n1",
			Resources: []*anypb.Any{wrapped(t, "other", mustAny(t, cluster("c")))}})
		if nack := reqs[0].GetErrorDetail().GetMessage(); !strings.Contains(nack, `resource other: body is named "c"`) {
			t.Fatalf("NACK %q", nack)
		}
	})
	t.Run("delta", func(t *testing.T) {
		e := newEng(Delta)
		reqs := e.handleDelta(context.Background(), &xdswire.DeltaDiscoveryResponse{TypeUrl: typeLbEndpoint, Nonce: "n1",
			Resources: []*xdswire.Resource{{Name: "x/1", Version: "1", Resource: ep}}})
		if nack := reqs[0].GetErrorDetail().GetMessage(); nack != "" {
			t.Fatalf("NACK %q", nack)
		}
		if _, ok := e.state.Resources[typeLbEndpoint]["x/1"]; !ok {
			t.Fatalf("held %v, want x/1", e.state.Resources[typeLbEndpoint])
		}
	})
}
