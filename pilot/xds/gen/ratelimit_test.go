package gen

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// TestInboundRateLimit: what the sidecar decodes from each proxy's clusters in
// testdata/ratelimit.input.yaml: the limit is on the inbound cluster of a
// sidecar whose workload a limited Service selects (the strictest when two
// Services target one port), on no other inbound cluster, and on every client's
// outbound clusters of the limited Services.
func TestInboundRateLimit(t *testing.T) {
	m, ps := meshFromFile(t, "testdata/ratelimit.input.yaml")
	limited := map[string]*xdsresource.RateLimit{
		"outbound|9080||reviews.shop.svc.cluster.local": {RequestsPerSecond: 100, Burst: 200},
		"outbound|7000||reviews.shop.svc.cluster.local": {RequestsPerSecond: 100, Burst: 200},
		"outbound|9081||ratings.shop.svc.cluster.local": {RequestsPerSecond: 50, Burst: 50},
	}
	want := map[string]map[string]*xdsresource.RateLimit{
		"reviews-1": {
			"inbound|8080||": {RequestsPerSecond: 50, Burst: 50}, // ratings' is stricter than reviews'
			"inbound|7000||": {RequestsPerSecond: 100, Burst: 200},
		},
		"details-1":  {"inbound|9080||": nil},
		"frontend-1": {},
	}
	for id, inbound := range want {
		s := mustProxy(t, m, proxyByID(t, ps, id))
		got := map[string]*xdsresource.RateLimit{}
		for name, r := range s.Resources[snapshot.ClusterType] {
			_, v, err := xdsresource.Decode(snapshot.ClusterType, r.Any)
			if err != nil {
				t.Fatalf("%s: cluster %s: %v", id, name, err)
			}
			got[name] = v.(*xdsresource.Cluster).RateLimit
		}
		exp := map[string]*xdsresource.RateLimit{"outbound|9080||details.shop.svc.cluster.local": nil}
		for k, v := range limited {
			exp[k] = v
		}
		for k, v := range inbound {
			exp[k] = v
		}
		if d := cmp.Diff(exp, got); d != "" {
			t.Errorf("%s: rate limits by cluster (-want +got):\n%s", id, d)
		}
	}
}

// TestStricter: the order inboundRateLimit picks by.
func TestStricter(t *testing.T) {
	for _, tc := range []struct {
		a, b ir.LocalRateLimit
		want bool
	}{
		{ir.LocalRateLimit{RequestsPerSecond: 10}, ir.LocalRateLimit{RequestsPerSecond: 20}, true},
		{ir.LocalRateLimit{RequestsPerSecond: 20}, ir.LocalRateLimit{RequestsPerSecond: 10, DryRun: true}, true}, // enforcing beats dry run
		{ir.LocalRateLimit{RequestsPerSecond: 10, DryRun: true}, ir.LocalRateLimit{RequestsPerSecond: 20}, false},
		{ir.LocalRateLimit{RequestsPerSecond: 10, DryRun: true}, ir.LocalRateLimit{RequestsPerSecond: 20, DryRun: true}, true},
		{ir.LocalRateLimit{RequestsPerSecond: 20}, ir.LocalRateLimit{RequestsPerSecond: 10}, false},
		{ir.LocalRateLimit{RequestsPerSecond: 10, Burst: 5}, ir.LocalRateLimit{RequestsPerSecond: 10}, true},   // 5 < default 10
		{ir.LocalRateLimit{RequestsPerSecond: 10, Burst: 11}, ir.LocalRateLimit{RequestsPerSecond: 10}, false}, // 11 > default 10
		{ir.LocalRateLimit{RequestsPerSecond: 10, Burst: 10}, ir.LocalRateLimit{RequestsPerSecond: 10}, false}, // equal
		{ir.LocalRateLimit{RequestsPerSecond: 0.5}, ir.LocalRateLimit{RequestsPerSecond: 0.5, Burst: 2}, true}, // default 1
	} {
		if got := stricter(&tc.a, &tc.b); got != tc.want {
			t.Errorf("stricter(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
