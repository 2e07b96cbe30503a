package cluster_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

func TestServiceKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"outbound|9080|v1|reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local"},
		{"outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local"},
		{"outbound|9080|v2|reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local"},
		{"inbound|9080||", "inbound|9080||"},
		{"inbound|9080|v1|reviews", "inbound|9080|v1|reviews"}, // inbound: the name itself
		{"outbound|9080|v1", "outbound|9080|v1"},               // not the four-part form
		{"outbound|9080|v1|a|b", "outbound|9080|v1|a|b"},
		{"backend", "backend"},
		{"", ""},
	} {
		if got := cluster.ServiceKey(tc.in); got != tc.want {
			t.Errorf("ServiceKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func spec(name string, sh *cluster.Shared, addrs ...string) cluster.Spec {
	s := cluster.Spec{Name: name, ConnectTimeout: time.Second, Shared: sh}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, &cluster.Endpoint{Addr: netip.MustParseAddrPort(a), Weight: 1, Healthy: true})
	}
	return s
}

func mustNew(t *testing.T, s cluster.Spec) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Subset clusters of one Service share one breaker and the same hosts: a request
// to v1 and one to v2 count in one maxRequests and one least-request count.
func TestSubsetClustersShare(t *testing.T) {
	r := cluster.NewRegistry()
	v1, v2 := "outbound|9080|v1|reviews.shop.svc.cluster.local", "outbound|9080|v2|reviews.shop.svc.cluster.local"
	c1 := mustNew(t, spec(v1, r.Shared(cluster.ServiceKey(v1)), "10.0.0.1:9080", "10.0.0.2:9080"))
	c2 := mustNew(t, spec(v2, r.Shared(cluster.ServiceKey(v2)), "10.0.0.2:9080", "10.0.0.3:9080"))
	if c1.Shared != c2.Shared || c1.Breaker != c2.Breaker || c1.Breaker != c1.Shared.Breaker {
		t.Fatal("subset clusters do not share their Shared and breaker")
	}
	if c1.Endpoints()[1].Host != c2.Endpoints()[0].Host {
		t.Fatal("10.0.0.2:9080 has two hosts")
	}
	c1.Endpoints()[1].Begin()
	if got := c2.Endpoints()[0].Active(); got != 1 {
		t.Errorf("v2 sees %d in flight on the shared host, want 1", got)
	}
	c1.Endpoints()[1].End()
	if !c1.Breaker.Acquire(circuitbreak.Requests) {
		t.Fatal("acquire")
	}
	if got := c2.Breaker.InUse(circuitbreak.Requests); got != 1 {
		t.Errorf("v2 sees %d requests in use, want 1", got)
	}
	c1.Breaker.Release(circuitbreak.Requests)
	other := r.Shared("outbound|9080||ratings.shop.svc.cluster.local")
	if other == c1.Shared || other.Breaker == c1.Breaker {
		t.Error("another Service shares reviews' state")
	}
	if got := len(r.All()); got != 2 {
		t.Errorf("registry holds %d entries, want 2", got)
	}
}

// A private cluster (no Shared) gets its own state, limits from the Spec.
func TestPrivateShared(t *testing.T) {
	s := spec("a", nil, "10.0.0.1:80")
	s.Limits = circuitbreak.Limits{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: 2}
	a, b := mustNew(t, s), mustNew(t, s)
	if a.Shared == b.Shared || a.Endpoints()[0].Host == nil {
		t.Fatal("private clusters share state")
	}
	if got := a.Breaker.Limits(); !got.Equal(s.Limits) {
		t.Errorf("limits %s, want %s", got, s.Limits)
	}
	s.Limits.MaxRequests = 0
	if _, err := cluster.New(s); err == nil {
		t.Error("zero max requests accepted")
	}
}

func TestRetain(t *testing.T) {
	r := cluster.NewRegistry()
	keep := mustNew(t, spec("keep", r.Shared("keep"), "10.0.0.1:80", "10.0.0.2:80"))
	gone := mustNew(t, spec("gone", r.Shared("gone"), "10.0.0.9:80"))
	hostGone := keep.Endpoints()[1].Host
	// The next config: "gone" is dropped, "keep" loses 10.0.0.2.
	next := mustNew(t, spec("keep", r.Shared("keep"), "10.0.0.1:80"))
	r.Retain([]*cluster.Cluster{next})
	if got := r.All(); len(got) != 1 || got[0] != keep.Shared {
		t.Fatalf("after Retain: %v, want only keep's entry", got)
	}
	if next.Endpoints()[0].Host != keep.Endpoints()[0].Host {
		t.Error("retained host was replaced")
	}
	if hs := keep.Shared.Hosts(); len(hs) != 1 || hs[0].Address() != "10.0.0.1:80" {
		t.Errorf("hosts after Retain: %v", hs)
	}
	// Requests on the old config still hold working pointers.
	if !gone.Breaker.Acquire(circuitbreak.Requests) {
		t.Fatal("retired breaker refuses")
	}
	gone.Breaker.Release(circuitbreak.Requests)
	hostGone.Begin()
	hostGone.End()
	// Re-added later: fresh state.
	if r.Shared("gone") == gone.Shared || keep.Shared.Host(hostGone.Addr) == hostGone {
		t.Error("a retired entry came back")
	}
	// A cluster of another registry is ignored; an empty live set retires everything.
	foreign := spec("keep", nil, "10.0.0.1:80")
	foreign.Limits = circuitbreak.DefaultLimits
	r.Retain([]*cluster.Cluster{mustNew(t, foreign)})
	if n := r.Len(); n != 0 {
		t.Errorf("%d entries left, want 0", n)
	}
}
