package cluster_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

func TestSelfContains(t *testing.T) {
	ap := netip.MustParseAddrPort
	self := cluster.NewSelf(
		[]netip.AddrPort{ap("127.0.0.1:15001"), ap("[::1]:15001"), ap("0.0.0.0:15006"), ap("[::]:15006"), ap("127.0.0.1:15000")},
		[]netip.Addr{netip.MustParseAddr("10.250.0.11"), netip.MustParseAddr("fd00:250::11")})
	for dst, want := range map[string]bool{
		"127.0.0.1:15001":            true,
		"[::ffff:127.0.0.1]:15001":   true,
		"[::1]:15001":                true,
		"127.0.0.1:15000":            true,
		"127.0.0.1:15006":            true, // wildcard: loopback
		"[::1]:15006":                true,
		"0.0.0.0:15006":              true,
		"10.250.0.11:15006":          true, // wildcard: a local address
		"[fd00:250::11]:15006":       true,
		"10.250.0.12:15006":          false, // another pod's inbound listener
		"127.0.0.2:15001":            false, // nothing listens there
		"10.250.0.11:15001":          false, // 15001 is bound to loopback only
		"10.250.0.11:8080":           false,
		"240.240.0.1:80":             false,
		"[::ffff:10.250.0.11]:15006": true,
	} {
		if got := self.Contains(ap(dst)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", dst, got, want)
		}
	}
	var none *cluster.Self
	if none.Contains(ap("127.0.0.1:15001")) {
		t.Error("a nil Self contains nothing")
	}
}

func special(t *testing.T, origDst, blackHole bool) *cluster.Cluster {
	t.Helper()
	c, err := cluster.New(cluster.Spec{Name: "PassthroughCluster", ConnectTimeout: time.Second, Limits: circuitbreak.DefaultLimits, OriginalDst: origDst, BlackHole: blackHole})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPassthroughEndpoint(t *testing.T) {
	ap := netip.MustParseAddrPort
	p := cluster.NewPassthrough(cluster.NewSelf([]netip.AddrPort{ap("127.0.0.1:15001")}, nil))
	c := special(t, true, false)
	if !c.Special() || len(c.Endpoints()) != 0 {
		t.Fatalf("cluster %+v", c)
	}
	e, err := p.Endpoint(c, ap("[::ffff:93.184.216.34]:443"))
	if err != nil || e.Address() != "93.184.216.34:443" {
		t.Fatalf("Endpoint = %v, %v", e, err)
	}
	if again, _ := p.Endpoint(c, ap("93.184.216.34:443")); again != e {
		t.Error("a destination's endpoint is not reused (its pooled connections would not be)")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = p.Endpoint(c, ap("93.184.216.34:443")) }); n != 0 {
		t.Errorf("Endpoint for a known destination allocates %v times", n)
	}
	_, err = p.Endpoint(c, ap("127.0.0.1:15001"))
	if !errors.Is(err, cluster.ErrLoop) || err.Error() != `cluster "PassthroughCluster": 127.0.0.1:15001: original destination is the sidecar's own listener (loop refused)` {
		t.Errorf("loop: %v", err)
	}
	for _, d := range []netip.AddrPort{{}, ap("10.0.0.1:0"), ap("0.0.0.0:80")} {
		if _, err := p.Endpoint(c, d); !errors.Is(err, cluster.ErrNoDestination) {
			t.Errorf("destination %v: %v, want ErrNoDestination", d, err)
		}
	}
	bh := special(t, false, true)
	if _, err := p.Endpoint(bh, ap("8.8.8.8:53")); !errors.Is(err, cluster.ErrBlackHole) {
		t.Errorf("black hole: %v", err)
	}
	if _, err := bh.Pick(0); !errors.Is(err, cluster.ErrNoEndpoint) {
		t.Errorf("black hole Pick: %v", err)
	}
	// 2 + AllocsPerRun's 101 calls.
	want := cluster.PassthroughStats{Forwarded: 103, Loops: 1, BlackHoled: 1, NoDest: 3}
	if got := p.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	if _, err := cluster.New(cluster.Spec{Name: "x", ConnectTimeout: time.Second, OriginalDst: true, Endpoints: []*cluster.Endpoint{cluster.NewEndpoint(ap("10.0.0.1:80"), 1, true)}}); err == nil {
		t.Error("an original-destination cluster with endpoints was accepted")
	}
	if _, err := cluster.New(cluster.Spec{Name: "x", ConnectTimeout: time.Second, OriginalDst: true, BlackHole: true}); err == nil {
		t.Error("OriginalDst and BlackHole together were accepted")
	}
}

// TestPassthroughHostBound: MaxOriginalDstHosts destinations are kept; past
// the bound endpoints still work, each fresh.
func TestPassthroughHostBound(t *testing.T) {
	p := cluster.NewPassthrough(nil)
	c := special(t, true, false)
	dst := func(i int) netip.AddrPort {
		return netip.MustParseAddrPort(fmt.Sprintf("10.%d.%d.1:80", i>>8, i&0xff))
	}
	for i := range cluster.MaxOriginalDstHosts {
		if _, err := p.Endpoint(c, dst(i)); err != nil {
			t.Fatal(err)
		}
	}
	last, _ := p.Endpoint(c, dst(cluster.MaxOriginalDstHosts-1))
	if again, _ := p.Endpoint(c, dst(cluster.MaxOriginalDstHosts-1)); again != last {
		t.Error("the bound's last destination is not kept")
	}
	over, err := p.Endpoint(c, dst(cluster.MaxOriginalDstHosts))
	if err != nil || over.Address() != dst(cluster.MaxOriginalDstHosts).String() {
		t.Fatalf("one past the bound: %v, %v", over, err)
	}
	if again, _ := p.Endpoint(c, dst(cluster.MaxOriginalDstHosts)); again == over {
		t.Error("one past the bound was kept")
	}
}
