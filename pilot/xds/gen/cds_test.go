package gen

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/pilot/compile"
	"github.com/weft-mesh/weft/pilot/resource"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const resilienceCluster = "outbound|9080||reviews.shop.svc.cluster.local"

// sidecarCluster compiles a reviews Service with the given DestinationPolicy spec
// and returns the outbound cluster as a Weft sidecar decodes it.
func sidecarCluster(t *testing.T, policy string) *xdsresource.Cluster {
	t.Helper()
	y := `apiVersion: mesh.weft.dev/v1alpha1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, protocol: HTTP}]
---
apiVersion: mesh.weft.dev/v1alpha1
kind: Workload
metadata: {name: r1, namespace: shop, labels: {app: reviews}}
spec: {address: 10.0.0.1, serviceAccount: reviews}
---
apiVersion: mesh.weft.dev/v1alpha1
kind: DestinationPolicy
metadata: {name: reviews, namespace: shop}
spec: ` + policy + "\n"
	objs, err := resource.Decode([]byte(y), "policy.yaml")
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	p := &node.Node{ID: "client", Namespace: "shop", ServiceAccount: "client", Address: "10.0.0.9", InboundPort: 15006}
	m, err := compile.Compile(compile.Input{Revision: 1, Objects: objs, Proxies: []*node.Node{p}})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if len(m.Warnings) > 0 {
		t.Fatalf("compile warnings: %v", m.Warnings)
	}
	s := mustProxy(t, m, p)
	if err := sidecarAccepts(s); err != nil {
		t.Fatalf("sidecar rejects: %v", err)
	}
	r, ok := s.Resources[snapshot.ClusterType][resilienceCluster]
	if !ok {
		t.Fatalf("no cluster %s; have %v", resilienceCluster, s.Names(snapshot.ClusterType))
	}
	_, v, err := xdsresource.Decode(snapshot.ClusterType, r.Any)
	if err != nil {
		t.Fatal(err)
	}
	return v.(*xdsresource.Cluster)
}

// TestResilienceReachesSidecar: each DestinationPolicy resilience field, through
// compile and CDS, decodes in the sidecar to what the API says; detectors the
// policy does not name are off (enforcing 0), whatever Envoy's defaults are.
func TestResilienceReachesSidecar(t *testing.T) {
	// base is the decoded outlier detection for a policy naming nothing but
	// consecutive5xx 7: Envoy's defaults for values, enforcement only for 5xx.
	base := func() *xdsresource.Outlier {
		return &xdsresource.Outlier{
			Consecutive5xx: 7, ConsecutiveGatewayFailure: 5, ConsecutiveLocalOriginFailure: 5,
			EnforcingConsecutive5xx: 100,
			Interval:                10 * time.Second, BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second,
			MaxEjectionPercent: 10,
		}
	}
	tests := []struct {
		name   string
		policy string
		check  func(t *testing.T, c *xdsresource.Cluster)
	}{
		{"consecutive 5xx alone", `{service: reviews, outlierDetection: {consecutive5xx: 7}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if d := cmp.Diff(base(), c.Outlier); d != "" {
				t.Errorf("outlier (-want +got):\n%s", d)
			}
			if c.PanicThreshold != 50 {
				t.Errorf("PanicThreshold = %v, want Envoy's default 50", c.PanicThreshold)
			}
		}},
		{"every field", `{service: reviews, outlierDetection: {consecutive5xx: 7, consecutiveGatewayErrors: 3, consecutiveLocalOriginFailures: 4,
  successRate: {minHosts: 2, requestVolume: 20, stdevFactor: 1.5}, failurePercentage: {threshold: 60, minHosts: 3, requestVolume: 30},
  interval: 1s, baseEjectionTime: 2s, maxEjectionTime: 20s, maxEjectionTimeJitter: 500ms, maxEjectionPercent: 34, minHealthPercent: 30}}`,
			func(t *testing.T, c *xdsresource.Cluster) {
				want := &xdsresource.Outlier{
					Consecutive5xx: 7, ConsecutiveGatewayFailure: 3, ConsecutiveLocalOriginFailure: 4,
					EnforcingConsecutive5xx: 100, EnforcingConsecutiveGatewayFailure: 100, EnforcingConsecutiveLocalOriginFailure: 100,
					SplitExternalLocalOriginErrors: true, // implied by consecutiveLocalOriginFailures
					SuccessRate:                    &xdsresource.SuccessRate{MinimumHosts: 2, RequestVolume: 20, StdevFactor: 1.5, Enforcing: 100, EnforcingLocalOrigin: 100},
					FailurePercentage:              &xdsresource.FailurePercentage{Threshold: 60, MinimumHosts: 3, RequestVolume: 30, Enforcing: 100, EnforcingLocalOrigin: 100},
					Interval:                       time.Second, BaseEjectionTime: 2 * time.Second, MaxEjectionTime: 20 * time.Second,
					MaxEjectionTimeJitter: 500 * time.Millisecond, MaxEjectionPercent: 34,
				}
				if d := cmp.Diff(want, c.Outlier); d != "" {
					t.Errorf("outlier (-want +got):\n%s", d)
				}
				if c.PanicThreshold != 30 {
					t.Errorf("PanicThreshold = %v, want 30 (minHealthPercent)", c.PanicThreshold)
				}
			}},
		{"minHealthPercent 0: panic mode never", `{service: reviews, outlierDetection: {consecutive5xx: 7, minHealthPercent: 0}}`,
			func(t *testing.T, c *xdsresource.Cluster) {
				if c.PanicThreshold != 0 {
					t.Errorf("PanicThreshold = %v, want 0 (an explicit minHealthPercent: 0 is not absent)", c.PanicThreshold)
				}
			}},
		{"split without the local-origin detector", `{service: reviews, outlierDetection: {consecutive5xx: 7, splitExternalLocalOriginErrors: true}}`,
			func(t *testing.T, c *xdsresource.Cluster) {
				want := base()
				want.SplitExternalLocalOriginErrors = true // counted apart; no local-origin detector enforces
				if d := cmp.Diff(want, c.Outlier); d != "" {
					t.Errorf("outlier (-want +got):\n%s", d)
				}
			}},
		{"explicit split false", `{service: reviews, outlierDetection: {consecutive5xx: 7, splitExternalLocalOriginErrors: false, successRate: {}}}`,
			func(t *testing.T, c *xdsresource.Cluster) {
				want := base()
				// Success rate's local-origin part is off: without the split there is none.
				want.SuccessRate = &xdsresource.SuccessRate{MinimumHosts: 5, RequestVolume: 100, StdevFactor: 1.9, Enforcing: 100}
				if d := cmp.Diff(want, c.Outlier); d != "" {
					t.Errorf("outlier (-want +got):\n%s", d)
				}
			}},
		{"long base ejection: max follows", `{service: reviews, outlierDetection: {consecutive5xx: 7, baseEjectionTime: 10m}}`,
			func(t *testing.T, c *xdsresource.Cluster) {
				if c.Outlier.BaseEjectionTime != 10*time.Minute || c.Outlier.MaxEjectionTime != 10*time.Minute {
					t.Errorf("base %v max %v, want 10m 10m", c.Outlier.BaseEjectionTime, c.Outlier.MaxEjectionTime)
				}
			}},
		{"no outlier detection", `{service: reviews, connectionPool: {maxRequests: 10}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if c.Outlier != nil || c.Budget != nil || c.RateLimit != nil {
				t.Errorf("Outlier %v Budget %v RateLimit %v, want all nil", c.Outlier, c.Budget, c.RateLimit)
			}
			if c.Limits.MaxRequests != 10 {
				t.Errorf("MaxRequests = %d", c.Limits.MaxRequests)
			}
		}},
		{"retry budget defaults", `{service: reviews, connectionPool: {retryBudget: {percent: 20}}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if d := cmp.Diff(&xdsresource.RetryBudget{Percent: 20, MinConcurrency: 3}, c.Budget); d != "" {
				t.Errorf("budget (-want +got):\n%s", d)
			}
			if c.Limits.MaxRetries != math.MaxUint32 {
				t.Errorf("MaxRetries = %d: without maxRetries the budget alone bounds retries (as in Envoy)", c.Limits.MaxRetries)
			}
		}},
		{"retry budget set", `{service: reviews, connectionPool: {maxRetries: 5, retryBudget: {percent: 12.5, minConcurrency: 1}}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if d := cmp.Diff(&xdsresource.RetryBudget{Percent: 12.5, MinConcurrency: 1}, c.Budget); d != "" {
				t.Errorf("budget (-want +got):\n%s", d)
			}
			if c.Limits.MaxRetries != 5 {
				t.Errorf("MaxRetries = %d", c.Limits.MaxRetries)
			}
		}},
		{"rate limit", `{service: reviews, localRateLimit: {requestsPerSecond: 100, burst: 200, dryRun: true}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if d := cmp.Diff(&xdsresource.RateLimit{RequestsPerSecond: 100, Burst: 200, DryRun: true}, c.RateLimit); d != "" {
				t.Errorf("rate limit (-want +got):\n%s", d)
			}
		}},
		{"rate limit default burst", `{service: reviews, localRateLimit: {requestsPerSecond: 2.5}}`, func(t *testing.T, c *xdsresource.Cluster) {
			if d := cmp.Diff(&xdsresource.RateLimit{RequestsPerSecond: 2.5, Burst: 3}, c.RateLimit); d != "" {
				t.Errorf("rate limit (-want +got):\n%s", d)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, sidecarCluster(t, tc.policy)) })
	}
}
