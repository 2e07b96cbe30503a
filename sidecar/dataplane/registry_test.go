package dataplane_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const (
	v1 = "outbound|9080|v1|reviews.shop.svc.cluster.local"
	v2 = "outbound|9080|v2|reviews.shop.svc.cluster.local"
)

// clusterState is a candidate with EDS clusters name → endpoint addresses, all
// with limits lim.
func clusterState(lim xdsresource.Thresholds, clusters map[string][]string) map[string]map[string]any {
	st := map[string]map[string]any{xdsresource.ClusterType: {}, xdsresource.EndpointType: {}}
	for name, addrs := range clusters {
		st[xdsresource.ClusterType][name] = &xdsresource.Cluster{Name: name, EDSName: name, ConnectTimeout: time.Second,
			LB: xdsresource.LeastRequest, Limits: lim}
		eps := &xdsresource.Endpoints{Name: name}
		for _, a := range addrs {
			eps.Endpoints = append(eps.Endpoints, xdsresource.Endpoint{Addr: netip.MustParseAddrPort(a), Weight: 1, Healthy: true})
		}
		st[xdsresource.EndpointType][name] = eps
	}
	return st
}

func compileWith(t testing.TB, reg *cluster.Registry, st map[string]map[string]any) *dataplane.Config {
	t.Helper()
	cfg, err := dataplane.CompileWith(st, dataplane.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// swapper is the runtime's activation in miniature: swap, then Activate.
type swapper struct {
	mu  sync.Mutex
	cur atomic.Pointer[dataplane.Config]
}

func (s *swapper) swap(cfg *dataplane.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur.Store(cfg)
	cfg.Activate()
}

var lim = xdsresource.Thresholds{MaxConnections: 8, MaxPendingRequests: 8, MaxRequests: 8, MaxRetries: 3}

// endpointSets alternate like EDS pushes: a host joins, one leaves, a subset moves.
var endpointSets = []map[string][]string{
	{v1: {"10.0.0.1:9080", "10.0.0.2:9080"}, v2: {"10.0.0.3:9080"}},
	{v1: {"10.0.0.1:9080", "10.0.0.2:9080", "10.0.0.4:9080"}, v2: {"10.0.0.3:9080"}},
	{v1: {"10.0.0.1:9080"}, v2: {"10.0.0.2:9080", "10.0.0.3:9080"}},
}

// Requests held across 1,000 swaps stay counted in the breaker and the hosts the
// new configs use, while other requests come and go through whichever config is
// current; afterwards every count returns to zero. Run with -race.
func TestCountsSurviveSwaps(t *testing.T) {
	reg := cluster.NewRegistry()
	var sw swapper
	sw.swap(compileWith(t, reg, clusterState(lim, endpointSets[0])))
	const held, churners = 4, 4 // held + churners ≤ MaxRequests: churn never overflows
	// Held requests: one per host 10.0.0.1 (in v1 in every set) and v2's first
	// endpoint of set 0, taken on the first config.
	first := sw.cur.Load()
	h1 := first.Cluster(v1).Endpoints()[0]
	for range held {
		if !first.Cluster(v1).Breaker.Acquire(circuitbreak.Requests) {
			t.Fatal("acquire refused")
		}
		h1.Begin()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range churners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{v1, v2}[i%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := sw.cur.Load().Cluster(name)
				if !c.Breaker.Acquire(circuitbreak.Requests) {
					refused.Add(1)
					continue
				}
				e, err := c.Pick(0)
				if err != nil {
					t.Error(err)
				}
				e.Begin()
				e.End()
				c.Breaker.Release(circuitbreak.Requests)
			}
		}()
	}
	for i := range 1000 {
		sw.swap(compileWith(t, reg, clusterState(lim, endpointSets[(i+1)%len(endpointSets)])))
		cur := sw.cur.Load()
		b := cur.Cluster(v1).Breaker
		if b != first.Cluster(v1).Breaker || cur.Cluster(v2).Breaker != b {
			t.Fatalf("swap %d: the breaker was replaced", i)
		}
		if n := b.InUse(circuitbreak.Requests); n < held || n > held+churners {
			t.Fatalf("swap %d: %d requests in use, want %d..%d", i, n, held, held+churners)
		}
		if cur.Cluster(v1).Endpoints()[0].Host != h1.Host {
			t.Fatalf("swap %d: host 10.0.0.1 was replaced", i)
		}
	}
	close(stop)
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Errorf("%d admissions refused below the limit", n)
	}
	cur := sw.cur.Load()
	b := cur.Cluster(v1).Breaker
	if got := b.InUse(circuitbreak.Requests); got != held {
		t.Fatalf("after the swaps %d requests in use, want the %d held", got, held)
	}
	if got := cur.Cluster(v1).Endpoints()[0].Active(); got != held {
		t.Fatalf("host 10.0.0.1 has %d in flight, want %d", got, held)
	}
	for range held {
		h1.End()
		b.Release(circuitbreak.Requests)
	}
	for _, r := range []circuitbreak.Resource{circuitbreak.Connections, circuitbreak.Pending, circuitbreak.Requests, circuitbreak.Retries} {
		if got := b.InUse(r); got != 0 {
			t.Errorf("%v in use at the end: %d", r, got)
		}
	}
	for _, s := range reg.All() {
		for _, h := range s.Hosts() {
			if h.Active() != 0 {
				t.Errorf("host %s: %d in flight at the end", h.Address(), h.Active())
			}
		}
	}
}

// maxConnections and maxRequests hold across swaps: many goroutines take slots
// through whichever config is current (configs swapping underneath), and the
// number of slots actually held, counted apart from the breaker, never exceeds the
// limit. With a breaker per config this reached limit × (configs in use).
func TestLimitsHoldAcrossSwaps(t *testing.T) {
	const limit = 3
	small := xdsresource.Thresholds{MaxConnections: limit, MaxPendingRequests: 1, MaxRequests: limit, MaxRetries: 0}
	reg := cluster.NewRegistry()
	var sw swapper
	sw.swap(compileWith(t, reg, clusterState(small, endpointSets[0])))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var held [2]atomic.Int64
	var peak [2]atomic.Int64
	var admitted atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := []circuitbreak.Resource{circuitbreak.Connections, circuitbreak.Requests}[i%2]
			name := []string{v1, v2}[i/2%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A request loads the config once and releases where it acquired,
				// while swaps go on underneath.
				b := sw.cur.Load().Cluster(name).Breaker
				if !b.Acquire(r) {
					continue
				}
				admitted.Add(1)
				n := held[i%2].Add(1)
				for {
					p := peak[i%2].Load()
					if n <= p || peak[i%2].CompareAndSwap(p, n) {
						break
					}
				}
				held[i%2].Add(-1)
				b.Release(r)
			}
		}()
	}
	// At least 1,000 swaps, and on until the requesters have been admitted
	// 1,000 times (on a loaded machine the swaps can finish before they run).
	for i := 0; i < 1000 || (admitted.Load() < 1000 && i < 1_000_000); i++ {
		sw.swap(compileWith(t, reg, clusterState(small, endpointSets[(i+1)%len(endpointSets)])))
	}
	close(stop)
	wg.Wait()
	if admitted.Load() == 0 {
		t.Fatal("nothing was admitted")
	}
	for i, name := range []string{"maxConnections", "maxRequests"} {
		if p := peak[i].Load(); p > limit {
			t.Errorf("%s %d exceeded across swaps: %d held at once", name, limit, p)
		}
	}
}

// Activate applies new limits in place (the counts stay) and retires what the new
// config does not reference; a refused candidate changes nothing.
func TestActivateAppliesAndRetires(t *testing.T) {
	reg := cluster.NewRegistry()
	var sw swapper
	both := map[string][]string{v1: {"10.0.0.1:9080"}, v2: {"10.0.0.2:9080"}, "inbound|80||": {"127.0.0.1:80"}}
	sw.swap(compileWith(t, reg, clusterState(lim, both)))
	old := sw.cur.Load()
	b := old.Cluster(v1).Breaker
	b.Acquire(circuitbreak.Requests)
	defer b.Release(circuitbreak.Requests)
	if got := reg.Len(); got != 2 {
		t.Fatalf("%d registry entries, want 2 (reviews, inbound)", got)
	}

	// Raised limits: compiled, not yet in force; in force after Activate.
	raised := lim
	raised.MaxRequests = 100
	next := compileWith(t, reg, clusterState(raised, both))
	if got := b.Limits().MaxRequests; got != lim.MaxRequests {
		t.Fatalf("compile applied limits before activation: max requests %d", got)
	}
	sw.swap(next)
	if got := b.Limits().MaxRequests; got != 100 {
		t.Fatalf("max requests after activation %d, want 100", got)
	}
	if got := b.InUse(circuitbreak.Requests); got != 1 {
		t.Fatalf("in use after activation %d, want 1", got)
	}

	// A refused candidate (a cluster without endpoints) applies and retires nothing.
	bad := clusterState(xdsresource.Thresholds{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 1}, map[string][]string{v1: {"10.0.0.1:9080"}})
	bad[xdsresource.ClusterType]["ghost"] = &xdsresource.Cluster{Name: "ghost", EDSName: "ghost", ConnectTimeout: time.Second, Limits: lim}
	if _, err := dataplane.CompileWith(bad, dataplane.Options{Registry: reg}); err == nil {
		t.Fatal("candidate with a missing endpoints resource compiled")
	}
	if got := b.Limits().MaxRequests; got != 100 {
		t.Errorf("a refused candidate changed max requests to %d", got)
	}
	for _, name := range []string{v1, "inbound|80||"} {
		if sw.cur.Load().Cluster(name).Shared != reg.Shared(cluster.ServiceKey(name)) {
			t.Errorf("a refused candidate retired %s", name)
		}
	}

	// Reviews dropped: its entry is retired; the old config's pointers still work.
	sw.swap(compileWith(t, reg, clusterState(lim, map[string][]string{"inbound|80||": {"127.0.0.1:80"}})))
	if got := reg.All(); len(got) != 1 || got[0].Key != "inbound|80||" {
		t.Fatalf("after dropping reviews: %d entries", len(got))
	}
	if !old.Cluster(v2).Breaker.Acquire(circuitbreak.Requests) {
		t.Fatal("retired breaker refuses")
	}
	old.Cluster(v2).Breaker.Release(circuitbreak.Requests)
}

// Subset clusters of one Service compile onto one breaker and must agree on limits.
func TestSubsetClustersShareBreaker(t *testing.T) {
	reg := cluster.NewRegistry()
	cfg := compileWith(t, reg, clusterState(lim, endpointSets[2]))
	c1, c2 := cfg.Cluster(v1), cfg.Cluster(v2)
	if c1.Breaker != c2.Breaker || c1.Shared.Key != "outbound|9080||reviews.shop.svc.cluster.local" {
		t.Fatalf("subsets do not share: %p %p key %q", c1.Breaker, c2.Breaker, c1.Shared.Key)
	}
	st := clusterState(lim, endpointSets[2])
	other := lim
	other.MaxConnections = 9
	st[xdsresource.ClusterType][v2].(*xdsresource.Cluster).Limits = other
	_, err := dataplane.CompileWith(st, dataplane.Options{Registry: reg})
	want := fmt.Sprintf(`invalid configuration: cluster %q: circuit_breakers (maxConnections 9, `, v2)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), `share one breaker`) {
		t.Fatalf("differing subset limits: %v", err)
	}
}

// Without a Registry each compile is private and its limits are in force at once.
func TestCompileWithoutRegistry(t *testing.T) {
	st := clusterState(lim, endpointSets[0])
	a, b := compileWith(t, nil, st), compileWith(t, nil, st)
	if a.Cluster(v1).Breaker == b.Cluster(v1).Breaker {
		t.Fatal("two compiles without a registry share a breaker")
	}
	if got := a.Cluster(v1).Breaker.Limits().MaxRequests; got != lim.MaxRequests {
		t.Errorf("max requests %d, want %d", got, lim.MaxRequests)
	}
}
