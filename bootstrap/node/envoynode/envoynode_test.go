package envoynode

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/weft-mesh/weft/bootstrap/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func labels(n, keyBytes, valueBytes int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		k := fmt.Sprintf("k%d-", i)
		k += strings.Repeat("x", max(keyBytes-len(k), 0))
		out[k] = strings.Repeat("v", valueBytes)
	}
	return out
}

func registering(edit func(*node.Node)) *corev3.Node {
	n := &node.Node{ID: "sidecar-1", Namespace: "shop", ServiceAccount: "reviews", Address: "10.0.0.1", InboundPort: 15006, Labels: map[string]string{"app": "reviews"}}
	edit(n)
	return ToProto(n)
}

// Every bound of FromProto, at the bound and one past it.
func TestFromProtoBounds(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name    string
		ok, bad *corev3.Node
		want    string
	}{
		{"id", &corev3.Node{Id: long(node.MaxIDBytes)}, &corev3.Node{Id: long(node.MaxIDBytes + 1)},
			`node id "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"...: 257 bytes, limit 256`},
		{"id of 1 MiB", &corev3.Node{Id: "x"}, &corev3.Node{Id: long(1 << 20)},
			`node id "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"...: 1048576 bytes, limit 256`},
		{"labels", registering(func(n *node.Node) { n.Labels = labels(node.MaxLabels, 8, 8) }), registering(func(n *node.Node) { n.Labels = labels(node.MaxLabels+1, 8, 8) }),
			"node sidecar-1: metadata.weft.labels: 65 labels, limit 64"},
		{"50,000 labels", registering(func(n *node.Node) {}), registering(func(n *node.Node) { n.Labels = labels(50_000, 1, 1) }),
			"node sidecar-1: metadata: 789034 bytes, limit 65536"},
		{"label key", registering(func(n *node.Node) { n.Labels = labels(1, node.MaxLabelKeyBytes, 1) }), registering(func(n *node.Node) { n.Labels = labels(1, node.MaxLabelKeyBytes+1, 1) }),
			`node sidecar-1: metadata.weft.labels: key "k0-xxxxxxxxxxxxxxxxxxxxxxxxxxxxx"...: 318 bytes, limit 317`},
		{"label value", registering(func(n *node.Node) { n.Labels = map[string]string{"app": long(node.MaxLabelValueBytes)} }),
			registering(func(n *node.Node) { n.Labels = map[string]string{"app": long(node.MaxLabelValueBytes + 1)} }),
			"node sidecar-1: metadata.weft.labels.app: value 257 bytes, limit 256"},
		{"largest labels fit the metadata bound", registering(func(n *node.Node) { n.Labels = labels(node.MaxLabels, node.MaxLabelKeyBytes, node.MaxLabelValueBytes) }),
			registering(func(n *node.Node) {
				n.Labels = labels(node.MaxLabels+1, node.MaxLabelKeyBytes, node.MaxLabelValueBytes)
			}),
			"node sidecar-1: metadata.weft.labels: 65 labels, limit 64"},
		{"namespace", registering(func(n *node.Node) { n.Namespace = long(node.MaxFieldBytes) }), registering(func(n *node.Node) { n.Namespace = long(node.MaxFieldBytes + 1) }),
			"node sidecar-1: metadata.weft.namespace: 257 bytes, limit 256"},
		{"client features", &corev3.Node{Id: "x", ClientFeatures: make([]string, node.MaxClientFeatures)}, &corev3.Node{Id: "x", ClientFeatures: make([]string, node.MaxClientFeatures+1)},
			"node x: client_features: 33 entries, limit 32"},
		{"locality", &corev3.Node{Id: "x", Locality: &corev3.Locality{Region: "r", Zone: long(node.MaxFieldBytes)}},
			&corev3.Node{Id: "x", Locality: &corev3.Locality{Region: "r", Zone: long(node.MaxFieldBytes + 1)}},
			"node x: locality.zone: 257 bytes, limit 256"},
		{"metadata", &corev3.Node{Id: "x", Metadata: padded(node.MaxMetadataBytes)}, &corev3.Node{Id: "x", Metadata: padded(node.MaxMetadataBytes + 1)},
			"node x: metadata: 65537 bytes, limit 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := FromProto(tc.ok); err != nil {
				t.Fatalf("at the bound: %v", err)
			}
			_, err := FromProto(tc.bad)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("past the bound: err = %v, want %q", err, tc.want)
			}
		})
	}
}

// padded is metadata of exactly size bytes encoded (foreign keys, ignored): a
// long value, and a short one to land on size between length-prefix steps.
func padded(size int) *structpb.Struct {
	for pad := size - 64; pad < size; pad++ {
		for fine := range 16 {
			s := &structpb.Struct{Fields: map[string]*structpb.Value{
				"other": structpb.NewStringValue(strings.Repeat("p", pad)), "fine": structpb.NewStringValue(strings.Repeat("f", fine))}}
			if proto.Size(s) == size {
				return s
			}
		}
	}
	panic(fmt.Sprintf("cannot pad metadata to %d bytes", size))
}

// Identity is never read from metadata nor written to it.
func TestIdentityNotInMetadata(t *testing.T) {
	n := &node.Node{ID: "a", Namespace: "shop", Address: "10.0.0.1", Identity: "spiffe://cluster.local/ns/shop/sa/x"}
	p := ToProto(n)
	p.Metadata.Fields["weft.identity"] = structpb.NewStringValue("spiffe://cluster.local/ns/shop/sa/x")
	got, err := FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != "" {
		t.Fatalf("Identity = %q decoded from metadata", got.Identity)
	}
	for k := range ToProto(n).GetMetadata().GetFields() {
		if strings.Contains(strings.ToLower(k), "ident") {
			t.Fatalf("ToProto wrote %s", k)
		}
	}
}

// TestProxyless: a gRPC library's node never registers as a sidecar, even
// with a namespace (pilot fills it in from its certificate) and an address
// (the Workload it serves), and that address must still be an IP literal.
func TestProxyless(t *testing.T) {
	grpcNode := func(addr string) *corev3.Node {
		p := registering(func(n *node.Node) { n.Address = addr })
		p.UserAgentName = "gRPC Go"
		return p
	}
	n, err := FromProto(grpcNode("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !n.Proxyless || n.Registers() {
		t.Errorf("gRPC Go node: Proxyless=%v Registers=%v, want true, false", n.Proxyless, n.Registers())
	}
	if _, err := FromProto(grpcNode("not-an-ip")); err == nil || !strings.Contains(err.Error(), `address: "not-an-ip" is not an IP literal`) {
		t.Errorf("bad proxyless address: err = %v", err)
	}
	s, err := FromProto(registering(func(*node.Node) {}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Proxyless || !s.Registers() {
		t.Errorf("Weft sidecar: Proxyless=%v Registers=%v, want false, true", s.Proxyless, s.Registers())
	}
	for agent, want := range map[string]bool{"gRPC Go": true, "gRPC Java": true, "gRPC C++": true, "weft-sidecar": false, "": false, "gRPCfoo": false} {
		if got := node.IsProxylessAgent(agent); got != want {
			t.Errorf("node.IsProxylessAgent(%q) = %v, want %v", agent, got, want)
		}
	}
}

// TestInterception: the mode round-trips through metadata weft.interception,
// and anything but "", iptables or ebpf is refused.
func TestInterception(t *testing.T) {
	for _, mode := range []string{node.InterceptionNone, node.InterceptionIPTables, node.InterceptionEBPF} {
		got, err := FromProto(registering(func(n *node.Node) { n.Interception = mode }))
		if err != nil {
			t.Fatalf("%q: %v", mode, err)
		}
		if got.Interception != mode {
			t.Errorf("Interception = %q, want %q", got.Interception, mode)
		}
	}
	p := registering(func(*node.Node) {})
	if _, ok := p.GetMetadata().GetFields()["weft.interception"]; ok {
		t.Error("explicit mode wrote weft.interception")
	}
	p.Metadata.Fields["weft.interception"] = structpb.NewStringValue("nft")
	if _, err := FromProto(p); err == nil || err.Error() != `node sidecar-1: interception: "nft" is not one of iptables, ebpf (or empty: explicit)` {
		t.Errorf("bad mode: err = %v", err)
	}
	p.Metadata.Fields["weft.interception"] = structpb.NewNumberValue(1)
	if _, err := FromProto(p); err == nil || err.Error() != "node sidecar-1: metadata.weft.interception: want string" {
		t.Errorf("number: err = %v", err)
	}
}

// LEDS round-trips through client_features; other features are ignored and a
// node without it (grpc-go's) gets whole assignments.
func TestLEDSFeature(t *testing.T) {
	p := registering(func(n *node.Node) { n.LEDS = true })
	if !slices.Equal(p.GetClientFeatures(), []string{node.FeatureLEDS}) {
		t.Fatalf("client_features = %q, want [%q]", p.GetClientFeatures(), node.FeatureLEDS)
	}
	n, err := FromProto(p)
	if err != nil || !n.LEDS {
		t.Fatalf("FromProto = %+v, %v; want LEDS", n, err)
	}
	plain := registering(func(*node.Node) {})
	if len(plain.GetClientFeatures()) != 0 {
		t.Fatalf("a node without LEDS sends client_features %q", plain.GetClientFeatures())
	}
	grpcGo := &corev3.Node{Id: "g", UserAgentName: "gRPC Go", ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-in-sotw"}}
	if n, err := FromProto(grpcGo); err != nil || n.LEDS {
		t.Fatalf("grpc-go node: %+v, %v; want no LEDS", n, err)
	}
}
