package xdsresource_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

var outAddr = dt.MustAddr("127.0.0.1:15001")

func cidr(addr string, bits uint32) *corev3.CidrRange {
	return &corev3.CidrRange{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(bits)}
}

func withRanges(fc *listenerv3.FilterChain, rs ...*corev3.CidrRange) *listenerv3.FilterChain {
	if fc.FilterChainMatch == nil {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{}
	}
	fc.FilterChainMatch.PrefixRanges = rs
	return fc
}

func TestDecodePrefixRanges(t *testing.T) {
	l := dt.Listener("outbound", outAddr,
		dt.WithPrefixRanges(dt.HTTPChain(9080, "outbound|9080"), "240.240.0.1/32", "fd00::1/128"),
		dt.WithPrefixRanges(dt.TCPChain(9000, "a"), "240.240.0.2"),
		dt.WithPrefixRanges(dt.TCPChain(9000, "b"), "240.240.0.3"),
		withRanges(dt.TCPChain(7000, "c"), cidr("10.1.2.3", 8), &corev3.CidrRange{AddressPrefix: "192.168.1.1"}),
		dt.TCPChain(9000, "port-only"),
	)
	_, v, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l))
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*xdsresource.Listener)
	want := [][]netip.Prefix{
		{netip.MustParsePrefix("240.240.0.1/32"), netip.MustParsePrefix("fd00::1/128")},
		{netip.MustParsePrefix("240.240.0.2/32")},
		{netip.MustParsePrefix("240.240.0.3/32")},
		{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/0")}, // masked; absent prefix_len is 0 (Envoy)
		nil,
	}
	for i, w := range want {
		if d := cmp.Diff(w, got.FilterChains[i].PrefixRanges, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
			t.Errorf("chain %d prefix ranges (-want +got):\n%s", i, d)
		}
	}
}

func TestDecodePrefixRangeErrors(t *testing.T) {
	// The bounds themselves (MaxPrefixRanges, MaxListenerPrefixRanges) are
	// tested at and one past in prefix_bounds_test.go, without the wire.
	tests := []struct {
		name string
		l    *listenerv3.Listener
		want string
	}{
		{"not an address", dt.Listener("outbound", outAddr, dt.TCPChain(1, "z"), withRanges(dt.TCPChain(9000, "a"), cidr("10.0.0.1", 32), cidr("reviews", 32))),
			`listener "outbound": filter_chains[1].filter_chain_match.prefix_ranges[1].address_prefix: not an IP literal: "reviews"`},
		{"empty address", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("", 0))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[0].address_prefix: not an IP literal: ""`},
		{"zone", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("fe80::1%eth0", 128))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[0].address_prefix: not an IP literal: "fe80::1%eth0"`},
		{"v4 too long", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("10.0.0.1", 33))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[0].prefix_len: 33 is longer than the address 10.0.0.1 (32 bits)`},
		{"v6 too long", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("fd00::1", 129))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[0].prefix_len: 129 is longer than the address fd00::1 (128 bits)`},
		{"mapped", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("::ffff:10.0.0.1", 128))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[0].address_prefix: ::ffff:10.0.0.1 is IPv4-mapped: use the IPv4 form`},
		{"repeated in a chain", dt.Listener("outbound", outAddr, withRanges(dt.TCPChain(9000, "a"), cidr("10.0.0.0", 8), cidr("10.1.0.0", 8))),
			`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges[1]: 10.0.0.0/8 repeats filter_chains[0].filter_chain_match.prefix_ranges[0]`},
		{"same VIP on two chains", dt.Listener("outbound", outAddr, dt.WithPrefixRanges(dt.TCPChain(9000, "a"), "240.240.0.1", "240.240.0.2"), dt.WithPrefixRanges(dt.TCPChain(9000, "b"), "240.240.0.2")),
			`listener "outbound": filter_chains[1].filter_chain_match: same match as filter_chains[0] (prefix range 240.240.0.2/32)`},
		{"server names still refused", dt.Listener("outbound", outAddr, func() *listenerv3.FilterChain {
			fc := dt.TCPChain(9000, "a")
			fc.FilterChainMatch.ServerNames = []string{"x"}
			return fc
		}()), `listener "outbound": filter_chains[0].filter_chain_match: only destination_port, prefix_ranges and transport_protocol are supported`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(tc.l))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Decode error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
	// Same port and VIP, different transports: not a duplicate.
	l := dt.Listener("inbound", outAddr, dt.WithTransport(dt.WithPrefixRanges(dt.TCPChain(9000, "a"), "10.0.0.1"), "raw_buffer"),
		dt.WithPrefixRanges(dt.TCPChain(9000, "b"), "10.0.0.1"))
	if _, _, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l)); err != nil {
		t.Errorf("same prefix, other transport: %v", err)
	}
}

func TestDecodeOriginalDstCluster(t *testing.T) {
	_, v, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(dt.OriginalDstCluster("PassthroughCluster", 2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	want := &xdsresource.Cluster{Name: "PassthroughCluster", OriginalDst: true, ConnectTimeout: 2 * time.Second,
		Limits: xdsresource.DefaultThresholds, PanicThreshold: 50}
	if d := cmp.Diff(want, v); d != "" {
		t.Errorf("cluster (-want +got):\n%s", d)
	}
	if _, names := v.(xdsresource.Referrer).References(); len(names) != 0 {
		t.Errorf("references %v, want none", names)
	}
	_, v, err = xdsresource.Decode(xdsresource.ClusterType, dt.Any(dt.BlackHoleCluster("BlackHoleCluster")))
	if err != nil {
		t.Fatal(err)
	}
	if c := v.(*xdsresource.Cluster); c.Static == nil || len(c.Static.Endpoints) != 0 || c.OriginalDst || c.ConnectTimeout != 5*time.Second {
		t.Errorf("black hole = %+v", c)
	}

	mod := func(f func(c *clusterv3.Cluster)) *clusterv3.Cluster {
		c := dt.OriginalDstCluster("p", 0)
		f(c)
		return c
	}
	tests := []struct {
		name string
		c    *clusterv3.Cluster
		want string
	}{
		{"round robin", mod(func(c *clusterv3.Cluster) { c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN }),
			`cluster "p": lb_policy: ROUND_ROBIN: type ORIGINAL_DST needs CLUSTER_PROVIDED`},
		{"cluster provided on EDS", dt.EDSCluster("e", dt.ClusterOpts{LB: clusterv3.Cluster_CLUSTER_PROVIDED}),
			`cluster "e": lb_policy: CLUSTER_PROVIDED is only valid with type ORIGINAL_DST`},
		{"endpoints", mod(func(c *clusterv3.Cluster) { c.LoadAssignment = dt.Endpoints("p", dt.MustAddr("10.0.0.1:80")) }),
			`cluster "p": load_assignment: an ORIGINAL_DST cluster has no endpoints of its own`},
		{"eds config", mod(func(c *clusterv3.Cluster) { c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{} }),
			`cluster "p": eds_cluster_config: not valid with type ORIGINAL_DST`},
		{"outlier", mod(func(c *clusterv3.Cluster) { c.OutlierDetection = &clusterv3.OutlierDetection{} }),
			`cluster "p": outlier_detection: not supported with type ORIGINAL_DST`},
		{"tls", mod(func(c *clusterv3.Cluster) { c.TransportSocket = dt.UpstreamTLS("x", nil) }),
			`cluster "p": transport_socket: not supported with type ORIGINAL_DST (passthrough forwards the application's bytes)`},
		{"http header", mod(func(c *clusterv3.Cluster) {
			c.LbConfig = &clusterv3.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &clusterv3.Cluster_OriginalDstLbConfig{UseHttpHeader: true}}
		}), `cluster "p": original_dst_lb_config: only the connection's original destination is supported (no header, metadata or port override)`},
		{"port override", mod(func(c *clusterv3.Cluster) {
			c.LbConfig = &clusterv3.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &clusterv3.Cluster_OriginalDstLbConfig{UpstreamPortOverride: wrapperspb.UInt32(80)}}
		}), `cluster "p": original_dst_lb_config: only the connection's original destination is supported (no header, metadata or port override)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(tc.c))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Decode error\n got: %v\nwant: %s", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), `cluster "`) {
				t.Errorf("error does not name the cluster")
			}
		})
	}
	// An empty original_dst_lb_config is the default.
	ok := mod(func(c *clusterv3.Cluster) {
		c.LbConfig = &clusterv3.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &clusterv3.Cluster_OriginalDstLbConfig{}}
	})
	if _, _, err := xdsresource.Decode(xdsresource.ClusterType, dt.Any(ok)); err != nil {
		t.Errorf("empty original_dst_lb_config: %v", err)
	}
}
