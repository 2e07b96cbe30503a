package runtime

import (
	"net/netip"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func staticCluster(name string, addrs ...string) *clusterv3.Cluster {
	var aps []netip.AddrPort
	for _, a := range addrs {
		aps = append(aps, dt.MustAddr(a))
	}
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: dt.Endpoints(name, aps...)}
}

// Pilot addresses a workload's application on 127.0.0.1; a sidecar with its own
// --app-address (side-by-side workloads on one machine) delivers there instead.
func TestInboundClusterUsesAppAddress(t *testing.T) {
	tests := []struct {
		name    string
		app     string // "" = not set
		cluster *clusterv3.Cluster
		want    []string
	}{
		{"inbound rewritten", "127.0.10.2", staticCluster("inbound|9080||", "127.0.0.1:9080"), []string{"127.0.10.2:9080"}},
		{"only localhost rewritten", "127.0.10.2", staticCluster("inbound|9080||", "127.0.0.1:9080", "10.1.1.1:9080"), []string{"127.0.10.2:9080", "10.1.1.1:9080"}},
		{"outbound untouched", "127.0.10.2", staticCluster("outbound|9080||x.demo.svc.cluster.local", "127.0.0.1:9080"), []string{"127.0.0.1:9080"}},
		{"default app address", "127.0.0.1", staticCluster("inbound|9080||", "127.0.0.1:9080"), []string{"127.0.0.1:9080"}},
		{"no app address", "", staticCluster("inbound|9080||", "127.0.0.1:9080"), []string{"127.0.0.1:9080"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.runtime(func(c *Config) {
				if tc.app != "" {
					c.AppAddress = netip.MustParseAddr(tc.app)
				}
			})
			a := dt.Any(tc.cluster)
			_, v, err := r.Decode(xdsresource.ClusterType, a)
			if err != nil {
				t.Fatal(err)
			}
			c := v.(*xdsresource.Cluster)
			var got []string
			for _, ep := range c.Static.Endpoints {
				got = append(got, ep.Addr.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("endpoints %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("endpoints %v, want %v", got, tc.want)
				}
			}
		})
	}
}
