package admin

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/circuitbreak"
	"github.com/weft-mesh/weft/sidecar/cluster"
)

func TestPassthroughCollector(t *testing.T) {
	if _, err := NewPassthroughCollector(nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil: %v", err)
	}
	p := cluster.NewPassthrough(cluster.NewSelf([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:15001")}, nil))
	od, err := cluster.New(cluster.Spec{Name: "PassthroughCluster", ConnectTimeout: time.Second, Limits: circuitbreak.DefaultLimits, OriginalDst: true})
	if err != nil {
		t.Fatal(err)
	}
	bh, err := cluster.New(cluster.Spec{Name: "BlackHoleCluster", ConnectTimeout: time.Second, Limits: circuitbreak.DefaultLimits, BlackHole: true})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = p.Endpoint(od, netip.MustParseAddrPort("10.0.0.1:80"))
	_, _ = p.Endpoint(od, netip.MustParseAddrPort("10.0.0.2:80"))
	_, _ = p.Endpoint(od, netip.MustParseAddrPort("127.0.0.1:15001"))
	_, _ = p.Endpoint(od, netip.AddrPort{})
	_, _ = p.Endpoint(bh, netip.MustParseAddrPort("10.0.0.1:80"))
	_, _ = p.Endpoint(bh, netip.MustParseAddrPort("10.0.0.1:81"))
	_, _ = p.Endpoint(bh, netip.MustParseAddrPort("10.0.0.1:82"))
	c, err := NewPassthroughCollector(p)
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, c)
	for name, want := range map[string]float64{
		"weft_passthrough_total{result=forwarded}":      2,
		"weft_passthrough_total{result=loop}":           1,
		"weft_passthrough_total{result=no_destination}": 1,
		"weft_passthrough_total{result=blackhole}":      3,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
