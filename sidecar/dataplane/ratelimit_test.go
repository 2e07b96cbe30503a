package dataplane_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/ratelimit"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// limitedState is clusterState with every cluster rate limited to rl (nil: none).
func limitedState(rl *xdsresource.RateLimit, clusters map[string][]string) map[string]map[string]any {
	st := clusterState(lim, clusters)
	for _, v := range st[xdsresource.ClusterType] {
		if rl != nil {
			cp := *rl
			v.(*xdsresource.Cluster).RateLimit = &cp
		}
	}
	return st
}

// The limit is applied at activation (never by a refused candidate), to the one
// limiter subset clusters share; swaps that keep it keep the bucket, a change
// of rate keeps the tokens in use, removing it turns the limiter off.
func TestRateLimitActivation(t *testing.T) {
	reg := cluster.NewRegistry()
	var sw swapper
	rl := &xdsresource.RateLimit{RequestsPerSecond: 0.01, Burst: 3}
	cfg := compileWith(t, reg, limitedState(rl, endpointSets[0]))
	l := cfg.Cluster(v1).Shared.Limiter
	if l != cfg.Cluster(v2).Shared.Limiter {
		t.Fatal("subset clusters do not share a limiter")
	}
	if l.Enabled() {
		t.Fatal("compile configured the limiter before activation")
	}
	sw.swap(cfg)
	if got := l.Config(); got != (ratelimit.Config{RequestsPerSecond: 0.01, Burst: 3}) {
		t.Fatalf("limiter after activation: %+v", got)
	}
	now := time.Now()
	for range 3 {
		if ok, _ := l.Allow(now); !ok {
			t.Fatal("refused within the burst")
		}
	}
	// 1,000 swaps (EDS pushes) mint nothing: the bucket stays empty.
	for i := range 1000 {
		sw.swap(compileWith(t, reg, limitedState(rl, endpointSets[i%len(endpointSets)])))
	}
	if ok, _ := l.Allow(now); ok {
		t.Fatal("a take succeeded after swaps of an unchanged limit: swaps refilled the bucket")
	}

	// A refused candidate with another rate changes nothing.
	bad := limitedState(&xdsresource.RateLimit{RequestsPerSecond: 1000, Burst: 1000}, endpointSets[0])
	bad[xdsresource.ClusterType]["ghost"] = &xdsresource.Cluster{Name: "ghost", EDSName: "ghost", ConnectTimeout: time.Second, Limits: lim}
	if _, err := dataplane.CompileWith(bad, dataplane.Options{Registry: reg}); err == nil {
		t.Fatal("candidate with a missing endpoints resource compiled")
	}
	if got := l.Config().RequestsPerSecond; got != 0.01 {
		t.Fatalf("a refused candidate set the rate to %v", got)
	}

	// Dry run switched on: the same limiter, counting instead of refusing.
	sw.swap(compileWith(t, reg, limitedState(&xdsresource.RateLimit{RequestsPerSecond: 0.01, Burst: 3, DryRun: true}, endpointSets[0])))
	if ok, _ := l.Allow(now); !ok || l.Stats().DryRunRejected != 1 {
		t.Fatalf("dry run: ok %v, stats %+v", ok, l.Stats())
	}
	// Removed: off, counters kept.
	sw.swap(compileWith(t, reg, limitedState(nil, endpointSets[0])))
	if l.Enabled() || l.Stats() != (ratelimit.Stats{Allowed: 3, Rejected: 1, DryRunRejected: 1}) {
		t.Fatalf("after removal: enabled %v, stats %+v", l.Enabled(), l.Stats())
	}
}

func TestRateLimitCompileErrors(t *testing.T) {
	t.Run("subsets disagree", func(t *testing.T) {
		st := limitedState(&xdsresource.RateLimit{RequestsPerSecond: 10, Burst: 10}, endpointSets[0])
		st[xdsresource.ClusterType][v2].(*xdsresource.Cluster).RateLimit.Burst = 20
		_, err := dataplane.CompileWith(st, dataplane.Options{Registry: cluster.NewRegistry()})
		want := fmt.Sprintf(`invalid configuration: cluster %q: metadata.filter_metadata["weft.localRateLimit"] (`, v2)
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "share one rate limit") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("one subset unlimited", func(t *testing.T) {
		st := limitedState(&xdsresource.RateLimit{RequestsPerSecond: 10, Burst: 10}, endpointSets[0])
		st[xdsresource.ClusterType][v2].(*xdsresource.Cluster).RateLimit = nil
		if _, err := dataplane.CompileWith(st, dataplane.Options{}); err == nil || !strings.Contains(err.Error(), "share one rate limit") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("bucket beyond the limiter's bounds", func(t *testing.T) {
		// Decodable (burst ≤ MaxRateLimitBurst) but a year and more to refill.
		st := limitedState(&xdsresource.RateLimit{RequestsPerSecond: 1, Burst: xdsresource.MaxRateLimitBurst}, endpointSets[0])
		_, err := dataplane.CompileWith(st, dataplane.Options{})
		if err == nil || !strings.Contains(err.Error(), `metadata.filter_metadata["weft.localRateLimit"]: burst: 1073741824 requests at 1 per second take`) {
			t.Fatalf("got %v", err)
		}
	})
}
