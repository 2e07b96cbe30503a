package cluster_test

import (
	"net/netip"
	"testing"

	"github.com/weft-mesh/weft/sidecar/cluster"
)

// A retry never goes to a host already tried while another usable one exists, for
// every policy, however the picker is weighted; once all were tried it reuses one.
func TestPickAvoiding(t *testing.T) {
	for _, p := range []struct {
		name string
		p    cluster.Policy
	}{{"round robin", cluster.RoundRobin}, {"least request", cluster.LeastRequest}, {"random", cluster.Random}, {"ring hash", cluster.RingHash}} {
		t.Run(p.name, func(t *testing.T) {
			// One heavy host draws nearly every pick, so re-asking the picker
			// alone would keep returning it: the scan must find the others.
			hosts := eps(1000, 1, 1)
			c := build(t, p.p, hosts, 7)
			for i := range 200 {
				hash := uint64(i) * 0x5851f42d4c957f2d
				var tried []*cluster.Endpoint
				for k := range len(hosts) {
					e, err := c.PickAvoiding(hash, tried)
					if err != nil {
						t.Fatal(err)
					}
					for _, x := range tried {
						if x == e {
							t.Fatalf("pick %d of request %d: %s tried already, %d of %d hosts tried", k, i, e.Address(), len(tried), len(hosts))
						}
					}
					tried = append(tried, e)
				}
				e, err := c.PickAvoiding(hash, tried)
				if err != nil || e == nil {
					t.Fatalf("all tried: got %v, %v; want one of them", e, err)
				}
			}
		})
	}
}

// An unhealthy host is not usable: a retry avoiding the only healthy host goes
// back to it rather than to the unhealthy one.
func TestPickAvoidingSkipsUnusable(t *testing.T) {
	good := cluster.NewEndpoint(netip.MustParseAddrPort("10.0.0.1:80"), 1, true)
	bad := cluster.NewEndpoint(netip.MustParseAddrPort("10.0.0.2:80"), 1, false)
	c := build(t, cluster.RoundRobin, []*cluster.Endpoint{good, bad}, 1)
	for range 10 {
		if e, err := c.PickAvoiding(0, []*cluster.Endpoint{good}); err != nil || e != good {
			t.Fatalf("got %v, %v; want the healthy host again", e, err)
		}
	}
	empty := build(t, cluster.RoundRobin, nil, 1)
	if _, err := empty.PickAvoiding(0, []*cluster.Endpoint{good}); err == nil {
		t.Fatal("empty cluster: want ErrNoEndpoint")
	}
}

func TestPickAvoidingAllocs(t *testing.T) {
	hosts := eps(1, 1, 1)
	c := build(t, cluster.RoundRobin, hosts, 1)
	tried := make([]*cluster.Endpoint, 0, 3)
	tried = append(tried, hosts[0], hosts[1])
	if n := testing.AllocsPerRun(100, func() { _, _ = c.PickAvoiding(0, tried) }); n != 0 {
		t.Errorf("PickAvoiding allocates %v per call", n)
	}
}
