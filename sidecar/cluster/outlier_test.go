package cluster_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/outlier"
)

// odConfig ejects on 5 consecutive 5xx for 30s, up to pct percent of the hosts.
func odConfig(pct uint32) *outlier.Config {
	return &outlier.Config{Consecutive5xx: 5, EnforcingConsecutive5xx: 100, Interval: 10 * time.Second,
		BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: pct}
}

// odCluster builds a cluster on a registry, as dataplane does: the Shared's
// detector configured, the registry retaining the cluster (members synced).
func odCluster(t testing.TB, p cluster.Policy, e []*cluster.Endpoint, oc *outlier.Config, panic float64) (*cluster.Cluster, *cluster.Registry) {
	t.Helper()
	reg := cluster.NewRegistry()
	sh := reg.Shared("outbound|80||svc")
	if err := sh.Outlier.Configure(oc); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	c, err := cluster.New(cluster.Spec{Name: "outbound|80||svc", Policy: p, RingMin: 1024, RingMax: 8192, ConnectTimeout: time.Second,
		Shared: sh, Endpoints: e, PanicThreshold: panic,
		Rand: func() uint64 { mu.Lock(); defer mu.Unlock(); return rng.Uint64() }})
	if err != nil {
		t.Fatal(err)
	}
	reg.Retain([]*cluster.Cluster{c})
	return c, reg
}

// fail sends n 503s to e through c.Observe.
func fail(c *cluster.Cluster, e *cluster.Endpoint, n int) {
	for range n {
		c.Observe(e, 503)
	}
}

var policies = []struct {
	name string
	p    cluster.Policy
}{{"round robin", cluster.RoundRobin}, {"least request", cluster.LeastRequest}, {"random", cluster.Random}, {"ring hash", cluster.RingHash}}

// TestPickersSkipEjected: the fifth 5xx in a row ejects at once, and from the next
// pick on no picker (nor a retry's PickAvoiding) chooses the host, while the
// others keep sharing the load; it comes back when its time is served.
func TestPickersSkipEjected(t *testing.T) {
	for _, p := range policies {
		t.Run(p.name, func(t *testing.T) {
			hosts := eps(1, 1, 1, 1)
			c, reg := odCluster(t, p.p, hosts, odConfig(50), 50)
			bad := hosts[1]
			fail(c, bad, 4)
			if bad.Host.Outlier.Ejected() {
				t.Fatal("ejected one 5xx early")
			}
			fail(c, bad, 1)
			if !bad.Host.Outlier.Ejected() {
				t.Fatal("not ejected at the fifth 5xx")
			}
			counts := map[*cluster.Endpoint]int{}
			const n = 3000
			for i := range n {
				e, err := c.Pick(uint64(i) * 0x9e3779b97f4a7c15)
				if err != nil {
					t.Fatal(err)
				}
				if e == bad {
					t.Fatalf("pick %d chose the ejected host", i)
				}
				counts[e]++
			}
			for _, e := range []*cluster.Endpoint{hosts[0], hosts[2], hosts[3]} {
				if share := float64(counts[e]) / n; share < 0.2 || share > 0.47 {
					t.Errorf("%s share %.3f, want about 1/3", e.Address(), share)
				}
			}
			if p.p == cluster.RoundRobin && (counts[hosts[0]] != n/3 || counts[hosts[2]] != n/3) {
				t.Errorf("round robin uneven past the ejected host: %d %d %d", counts[hosts[0]], counts[hosts[2]], counts[hosts[3]])
			}
			for i := range 300 {
				if x, err := c.PickAvoiding(uint64(i), []*cluster.Endpoint{hosts[0]}); err != nil || x == bad || x == hosts[0] {
					t.Fatalf("PickAvoiding: %v %v", x, err)
				}
			}
			evs, _ := reg.OutlierEvents().Take(nil)
			if len(evs) != 1 || evs[0].Action != outlier.Eject || evs[0].Host != bad.Address() || evs[0].Detector != outlier.KindConsecutive5xx {
				t.Fatalf("events %+v", evs)
			}
			if ej := reg.Ejections(); len(ej) != 1 || ej[0].Host != bad.Address() || ej[0].Service != "outbound|80||svc" {
				t.Fatalf("ejections %+v", ej)
			}
			// Its time served, it is picked again.
			reg.TickOutliers(evs[0].At.Add(evs[0].Duration), rand.Uint64)
			if bad.Host.Outlier.Ejected() {
				t.Fatal("still ejected after its time")
			}
			seen := false
			for i := range 100 {
				if e, _ := c.Pick(uint64(i) * 0x9e3779b97f4a7c15); e == bad {
					seen = true
				}
			}
			if !seen {
				t.Fatal("returned host never picked")
			}
		})
	}
}

// TestPanicMode: below PanicThreshold percent usable (EDS-healthy, not ejected)
// endpoints the pickers ignore ejections and say so; at or above it they skip
// ejected hosts; at threshold 0, every host ejected means no endpoint.
func TestPanicMode(t *testing.T) {
	for _, tc := range []struct {
		hosts, unhealthy, eject int
		threshold               float64
		panic                   bool
	}{
		{4, 0, 1, 50, false}, // 3/4 usable
		{4, 0, 2, 50, false}, // 2/4 = 50%: not below
		{4, 0, 2, 51, true},
		{4, 1, 1, 50, false}, // 2/4
		{4, 1, 2, 50, true},  // 1/4
		{3, 0, 1, 67, true},  // 2/3 = 66.7%
		{3, 0, 1, 66, false},
		{1, 0, 1, 50, true}, // the only host ejected: panic sends to it
		{1, 0, 1, 0, false}, // ... or, without panic, there is none
		{3, 0, 3, 0, false},
		{3, 0, 0, 100, false}, // nothing to ignore, nothing unusable
	} {
		t.Run(fmt.Sprintf("%d-hosts-%d-unhealthy-%d-ejected-at-%v", tc.hosts, tc.unhealthy, tc.eject, tc.threshold), func(t *testing.T) {
			hosts := eps(make([]uint32, tc.hosts)...)
			for _, e := range hosts[:tc.unhealthy] {
				e.Healthy = false
			}
			c, reg := odCluster(t, cluster.RoundRobin, hosts, odConfig(100), tc.threshold)
			ejected := map[*cluster.Endpoint]bool{}
			for _, e := range hosts[tc.hosts-tc.eject:] {
				fail(c, e, 5)
				ejected[e] = true
			}
			if c.Panic() != tc.panic {
				t.Fatalf("Panic() = %v, want %v", c.Panic(), tc.panic)
			}
			sawEjected := false
			for range 20 {
				e, err := c.Pick(0)
				if tc.eject == tc.hosts-tc.unhealthy && !tc.panic && tc.eject > 0 {
					if !errors.Is(err, cluster.ErrNoEndpoint) {
						t.Fatalf("every host ejected without panic: got %v, %v", e, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if ejected[e] {
					sawEjected = true
				}
			}
			if sawEjected != (tc.panic && tc.eject > 0) {
				t.Fatalf("picked an ejected host: %v, want %v", sawEjected, tc.panic)
			}
			if got := reg.OutlierTotals().PanicPicks; (got > 0) != (tc.panic && tc.eject > 0) {
				t.Fatalf("panic picks %d", got)
			}
		})
	}
}

// TestObserveOffCountsNothing: a service without outlier detection never ejects.
func TestObserveOffCountsNothing(t *testing.T) {
	hosts := eps(1, 1)
	c, _ := odCluster(t, cluster.RoundRobin, hosts, nil, 50)
	fail(c, hosts[0], 100)
	if hosts[0].Host.Outlier.Ejected() {
		t.Fatal("ejected with detection off")
	}
}

// TestPickWithEjectionAllocatesNothing: picks past ejected hosts and outcome
// recording stay allocation-free.
func TestPickWithEjectionAllocatesNothing(t *testing.T) {
	for _, p := range policies {
		hosts := eps(1, 1, 1, 1)
		c, _ := odCluster(t, p.p, hosts, odConfig(50), 50)
		fail(c, hosts[0], 5)
		if n := testing.AllocsPerRun(200, func() {
			e, _ := c.Pick(12345)
			c.Observe(e, 200)
			_, _ = c.PickAvoiding(1, []*cluster.Endpoint{e})
		}); n != 0 {
			t.Errorf("%s: %v allocations", p.name, n)
		}
	}
}

func benchCluster(b *testing.B, p cluster.Policy, ejected int) *cluster.Cluster {
	hosts := make([]*cluster.Endpoint, 10)
	for i := range hosts {
		hosts[i] = cluster.NewEndpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80), 1, true)
	}
	reg := cluster.NewRegistry()
	sh := reg.Shared("outbound|80||svc")
	if err := sh.Outlier.Configure(odConfig(50)); err != nil {
		b.Fatal(err)
	}
	c, err := cluster.New(cluster.Spec{Name: "outbound|80||svc", Policy: p, RingMin: 1024, RingMax: 8192, ConnectTimeout: time.Second,
		Shared: sh, Endpoints: hosts, PanicThreshold: 50}) // the production random source
	if err != nil {
		b.Fatal(err)
	}
	reg.Retain([]*cluster.Cluster{c})
	for _, e := range hosts[:ejected] {
		fail(c, e, 5)
	}
	return c
}

// BenchmarkPickOutlier is the picker with outlier state (make bench): ten hosts,
// none or two ejected.
func BenchmarkPickOutlier(b *testing.B) {
	for _, p := range policies {
		for _, ej := range []int{0, 2} {
			b.Run(fmt.Sprintf("%s/%d-ejected", p.name, ej), func(b *testing.B) {
				c := benchCluster(b, p.p, ej)
				b.ReportAllocs()
				b.ResetTimer()
				var h uint64
				for b.Loop() {
					h += 0x9e3779b97f4a7c15
					if _, err := c.Pick(h); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkObserve is the outcome recording a request makes once per attempt.
func BenchmarkObserve(b *testing.B) {
	c := benchCluster(b, cluster.RoundRobin, 0)
	e := c.Endpoints()[3]
	b.ReportAllocs()
	for b.Loop() {
		c.Observe(e, 200)
	}
}
