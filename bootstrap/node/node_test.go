package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ToWire and FromWire round-trip every field a node presents (the bounds are
// tested through envoynode, which pilot uses). Identity and Proxyless are
// never written: pilot sets them.
func TestWireRoundTrip(t *testing.T) {
	for _, n := range []*Node{
		{ID: "bare"},
		{ID: "sidecar-1", Namespace: "shop", ServiceAccount: "reviews", Labels: map[string]string{"app": "reviews", "v": "1"},
			Address: "10.0.0.1", InboundPort: 15006, Locality: Locality{Region: "eu", Zone: "eu-1", SubZone: "a"},
			Version: "v1.2.3", Interception: InterceptionEBPF, LEDS: true},
	} {
		w := n.ToWire()
		if w.UserAgentName != UserAgent || w.Cluster != n.Namespace {
			t.Errorf("%s: user agent %q, cluster %q", n.ID, w.UserAgentName, w.Cluster)
		}
		got, err := FromWire(w)
		if err != nil {
			t.Fatalf("%s: %v", n.ID, err)
		}
		if d := cmp.Diff(n, got); d != "" {
			t.Errorf("%s: round trip (-want +got):\n%s", n.ID, d)
		}
	}
}
