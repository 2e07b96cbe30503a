package dataplane_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func named(name string, fc *listenerv3.FilterChain) *listenerv3.FilterChain {
	fc.Name = name
	return fc
}

// interceptConfig is the LDS shape pilot sends for intercepted pods (the
// issue-10 contract): chains by port and VIP, a passthrough default chain.
func interceptConfig(t *testing.T, def string) *dataplane.Config {
	t.Helper()
	r := dt.Resources{}
	out := dt.Listener("outbound", dt.MustAddr("127.0.0.1:15001"),
		named("http9080", dt.WithPrefixRanges(dt.HTTPChain(9080, "outbound|9080"), "240.240.0.1", "240.240.0.2", "fd00::1")),
		named("a", dt.WithPrefixRanges(dt.TCPChain(9000, "a"), "240.240.0.3")),
		named("b", dt.WithPrefixRanges(dt.TCPChain(9000, "b"), "240.240.0.4", "fd00::4")),
		named("wide", dt.WithPrefixRanges(dt.TCPChain(9000, "wide"), "240.240.0.0/24")),
		named("wider", dt.WithPrefixRanges(dt.TCPChain(9000, "wider"), "240.240.0.0/16", "fd00::/64")),
		named("seven", dt.WithPrefixRanges(dt.TCPChain(7000, "seven"), "10.0.0.5")),
		named("portonly", dt.TCPChain(7000, "portonly")),
		named("anyport", dt.WithPrefixRanges(dt.TCPChain(0, "anyport"), "192.168.0.0/16")),
	)
	if def != "" {
		dt.WithDefault(out, named("default", dt.TCPChain(0, def)))
	}
	r.Add(xdsresource.ListenerType, out)
	r.Add(xdsresource.RouteType, dt.RouteConfig("outbound|9080", dt.VirtualHost("reviews", []string{"reviews.shop", "240.240.0.1", "240.240.0.1:9080"}, dt.PrefixRoute("/", "a", 0))))
	for _, c := range []string{"a", "b", "wide", "wider", "seven", "portonly", "anyport", "app"} {
		r.Add(xdsresource.ClusterType, dt.EDSCluster(c, dt.ClusterOpts{}))
		r.Add(xdsresource.EndpointType, dt.Endpoints(c, dt.MustAddr("10.9.9.9:80")))
	}
	r.Add(xdsresource.ClusterType, dt.OriginalDstCluster("PassthroughCluster", time.Second), dt.BlackHoleCluster("BlackHoleCluster"))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func chainName(fc *dataplane.FilterChain) string {
	if fc == nil {
		return "<nil>"
	}
	return fc.Name
}

func TestSelectDest(t *testing.T) {
	l := interceptConfig(t, "PassthroughCluster").Listener("outbound")
	for _, tc := range []struct {
		dst  string
		want string
	}{
		{"240.240.0.1:9080", "http9080"},
		{"240.240.0.2:9080", "http9080"},
		{"[fd00::1]:9080", "http9080"},
		{"[::ffff:240.240.0.1]:9080", "http9080"}, // a dual-stack socket's view of an IPv4 VIP
		{"240.240.0.9:9080", "default"},           // port matched, no prefix: any-port chains, then the default
		{"240.240.0.3:9000", "a"},                 // /32 beats /24 and /16
		{"240.240.0.4:9000", "b"},
		{"[fd00::4]:9000", "b"},
		{"240.240.0.5:9000", "wide"},  // /24 beats /16
		{"240.240.7.1:9000", "wider"}, // only the /16
		{"[fd00::9]:9000", "wider"},
		{"10.0.0.1:9000", "default"},
		{"10.0.0.5:7000", "seven"},
		{"10.0.0.6:7000", "portonly"}, // the port's chain without prefix_ranges
		{"192.168.3.3:5555", "anyport"},
		{"192.168.3.3:9000", "anyport"}, // port 9000 has no chain for it: the any-port chains
		{"8.8.8.8:443", "default"},
		{"127.0.0.1:15001", "<nil>"}, // explicit: a passthrough default cannot serve the listener itself
		{"[::1]:15001", "<nil>"},     // explicit too: the [::1] twin of the loopback listener
		{"127.0.0.1:15002", "default"},
	} {
		dst := dt.MustAddr(tc.dst)
		if got := chainName(l.SelectDest(dst, false)); got != tc.want {
			t.Errorf("SelectDest(%s) = %s, want %s", tc.dst, got, tc.want)
		}
		if l.SniffDest(dst) {
			t.Errorf("SniffDest(%s): no mTLS chain here", tc.dst)
		}
	}
	// Explicit mode: by port alone (the port in Host), prefix_ranges ignored.
	for _, tc := range []struct {
		port uint16
		want string
	}{
		{9080, "http9080"}, // the HTTP chain, whatever its VIPs
		{7000, "portonly"},
		{9000, "a"},      // only VIP-matched TCP chains: the port's first in wire order
		{15001, "<nil>"}, // the passthrough default is skipped
		{1234, "<nil>"},
	} {
		if got := chainName(l.Select(tc.port, false)); got != tc.want {
			t.Errorf("Select(%d) = %s, want %s", tc.port, got, tc.want)
		}
		if got := chainName(l.Chain(tc.port)); got != tc.want {
			t.Errorf("Chain(%d) = %s, want %s", tc.port, got, tc.want)
		}
	}
	// Direct (accepted where it was sent, wherever the sidecar is bound):
	// by port alone too, whatever the LDS listener's address.
	if got := chainName(l.SelectConn(dt.MustAddr("10.1.0.7:15001"), true, false)); got != "<nil>" {
		t.Errorf("direct to the pod IP's 15001: %s, want no chain (HTTP by Host)", got)
	}
	if got := chainName(l.SelectConn(dt.MustAddr("10.1.0.7:15001"), false, false)); got != "default" {
		t.Errorf("redirected to 10.1.0.7:15001: %s, want the default", got)
	}
	if l.SniffConn(dt.MustAddr("10.1.0.7:15001"), true) {
		t.Error("SniffConn: no mTLS chain here")
	}
	if got := l.HTTPPorts("reviews.shop"); len(got) != 1 || got[0] != 9080 {
		t.Errorf("HTTPPorts = %v, want [9080]", got)
	}

	// A black-hole default is skipped by explicit connections too; an
	// application default (the inbound listener's direct chain) is not.
	bh := interceptConfig(t, "BlackHoleCluster").Listener("outbound")
	if got := chainName(bh.SelectDest(dt.MustAddr("127.0.0.1:15001"), false)); got != "<nil>" {
		t.Errorf("black hole default, explicit: %s", got)
	}
	if got := chainName(bh.SelectDest(dt.MustAddr("8.8.8.8:443"), false)); got != "default" {
		t.Errorf("black hole default, intercepted: %s", got)
	}
	app := interceptConfig(t, "app").Listener("outbound")
	if got := chainName(app.SelectDest(dt.MustAddr("127.0.0.1:15001"), false)); got != "default" {
		t.Errorf("application default, explicit: %s", got)
	}
	none := interceptConfig(t, "").Listener("outbound")
	if got := chainName(none.SelectDest(dt.MustAddr("8.8.8.8:443"), false)); got != "<nil>" {
		t.Errorf("no default: %s", got)
	}
}

// TestSelectDestWildcardListener: a listener on 0.0.0.0 owns its port on
// every address (a peer dialling pod-ip:15006 is explicit).
func TestSelectDestWildcardListener(t *testing.T) {
	r := dt.Resources{}
	in := dt.Listener("inbound", dt.MustAddr("0.0.0.0:15006"), named("app8080", dt.TCPChain(8080, "app")))
	dt.WithDefault(in, named("direct", dt.TCPChain(0, "app")))
	r.Add(xdsresource.ListenerType, in)
	r.Add(xdsresource.ClusterType, dt.EDSCluster("app", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("app", dt.MustAddr("127.0.0.1:8080")))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Listener("inbound")
	for dst, want := range map[string]string{"10.1.0.7:8080": "app8080", "10.1.0.7:15006": "direct", "10.1.0.7:9999": "direct"} {
		if got := chainName(l.SelectDest(dt.MustAddr(dst), false)); got != want {
			t.Errorf("SelectDest(%s) = %s, want %s", dst, got, want)
		}
	}
	if !l.Explicit(dt.MustAddr("10.1.0.7:15006")) || !l.Explicit(dt.MustAddr("[::ffff:10.1.0.7]:15006")) || l.Explicit(dt.MustAddr("10.1.0.7:8080")) {
		t.Error("Explicit: wrong for a wildcard listener")
	}
}

func TestSelectDestAllocs(t *testing.T) {
	l := interceptConfig(t, "PassthroughCluster").Listener("outbound")
	dsts := []netip.AddrPort{dt.MustAddr("240.240.0.1:9080"), dt.MustAddr("240.240.7.1:9000"), dt.MustAddr("[fd00::9]:9000"), dt.MustAddr("8.8.8.8:443"), dt.MustAddr("127.0.0.1:15001")}
	if n := testing.AllocsPerRun(100, func() {
		for _, d := range dsts {
			_ = l.SelectDest(d, false)
		}
	}); n != 0 {
		t.Errorf("SelectDest allocates %v times", n)
	}
}

func TestOriginalDstClusterCompiles(t *testing.T) {
	cfg := interceptConfig(t, "PassthroughCluster")
	p := cfg.Cluster("PassthroughCluster")
	if p == nil || !p.OriginalDst || p.BlackHole || len(p.Endpoints()) != 0 || p.ConnectTimeout != time.Second {
		t.Fatalf("PassthroughCluster = %+v", p)
	}
	b := cfg.Cluster("BlackHoleCluster")
	if b == nil || !b.BlackHole || b.OriginalDst || len(b.Endpoints()) != 0 {
		t.Fatalf("BlackHoleCluster = %+v", b)
	}
	if a := cfg.Cluster("a"); a.BlackHole || a.OriginalDst {
		t.Errorf("an EDS cluster is neither: %+v", a)
	}
}

// BenchmarkSelectDest: chain selection for an intercepted connection on a
// listener with 1,000 TCP VIP chains and one HTTP chain of 1,000 VIPs on
// one port (an exact-map hit), a /16 (the prefix scan) and a miss (default).
func BenchmarkSelectDest(b *testing.B) {
	r := dt.Resources{}
	vips := make([]string, 1000)
	for i := range vips {
		vips[i] = fmt.Sprintf("240.240.%d.%d", i>>8, i&0xff)
	}
	chains := []*listenerv3.FilterChain{dt.WithPrefixRanges(dt.HTTPChain(80, "r"), vips...)}
	for i := range 1000 {
		chains = append(chains, dt.WithPrefixRanges(dt.TCPChain(9000, "c"), fmt.Sprintf("240.241.%d.%d", i>>8, i&0xff)))
	}
	chains = append(chains, dt.WithPrefixRanges(dt.TCPChain(9000, "c"), "10.0.0.0/16"))
	r.Add(xdsresource.ListenerType, dt.WithDefault(dt.Listener("outbound", dt.MustAddr("127.0.0.1:15001"), chains...), dt.TCPChain(0, "c")))
	r.Add(xdsresource.RouteType, dt.RouteConfig("r", dt.VirtualHost("v", []string{"*"}, dt.PrefixRoute("/", "c", 0))))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("c", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("c", dt.MustAddr("10.9.9.9:80")))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		b.Fatal(err)
	}
	l := cfg.Listener("outbound")
	for _, d := range []string{"240.240.3.7:80", "240.241.3.7:9000", "10.0.7.7:9000", "8.8.8.8:443"} {
		dst := dt.MustAddr(d)
		b.Run(d, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if l.SelectDest(dst, false) == nil {
					b.Fatal("no chain")
				}
			}
		})
	}
}
