package xdsresource

import (
	"fmt"
	"net/netip"
	"testing"

	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/sidecar/xdswire"
)

// The prefix-range bounds at and one past, on decodeListener directly: the
// wire round trip of 131,072 ranges would cost the race build ~20s.
func TestPrefixRangeBounds(t *testing.T) {
	ranges := func(n int) []*xdswire.CidrRange {
		rs := make([]*xdswire.CidrRange, n)
		for i := range rs {
			rs[i] = &xdswire.CidrRange{AddressPrefix: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), PrefixLen: wrapperspb.UInt32(32)}
		}
		return rs
	}
	tcp, err := anypb.New(&tcpv3.TcpProxy{StatPrefix: "c", ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	chain := func(port uint32, rs []*xdswire.CidrRange) *xdswire.FilterChain {
		return &xdswire.FilterChain{
			FilterChainMatch: &xdswire.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port), PrefixRanges: rs},
			Filters:          []*xdswire.Filter{{Name: "envoy.filters.network.tcp_proxy", ConfigType: &xdswire.Filter_TypedConfig{TypedConfig: tcp}}},
		}
	}
	listener := func(chains ...*xdswire.FilterChain) *xdswire.Listener {
		return &xdswire.Listener{Name: "outbound", FilterChains: chains, Address: &xdswire.Address{Address: &xdswire.Address_SocketAddress{
			SocketAddress: &xdswire.SocketAddress{Address: "127.0.0.1", PortSpecifier: &xdswire.SocketAddress_PortValue{PortValue: 15001}}}}}
	}
	full := ranges(MaxPrefixRanges + 1)
	atChain := full[:MaxPrefixRanges]
	// The listener's bound over chains of other ports (the same ranges: other
	// ports are other matches).
	var chains []*xdswire.FilterChain
	for i := 0; i*MaxPrefixRanges < MaxListenerPrefixRanges; i++ {
		chains = append(chains, chain(uint32(9000+i), atChain))
	}
	for _, tc := range []struct {
		name string
		l    *xdswire.Listener
		want string
	}{
		{"chain at its bound", listener(chain(9000, atChain)), ""},
		{"chain one past", listener(chain(9000, full)),
			fmt.Sprintf(`listener "outbound": filter_chains[0].filter_chain_match.prefix_ranges: %d prefix ranges, limit %d`, MaxPrefixRanges+1, MaxPrefixRanges)},
		{"listener at its bound", listener(chains...), ""},
		{"listener one past", listener(append(chains[:len(chains):len(chains)], chain(8000, full[:1]))...),
			fmt.Sprintf(`listener "outbound": filter_chains[%d].filter_chain_match.prefix_ranges: %d prefix ranges in the listener's chains so far, limit %d`,
				len(chains), MaxListenerPrefixRanges+1, MaxListenerPrefixRanges)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := decodeListener(tc.l)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				n := 0
				for _, c := range l.FilterChains {
					n += len(c.PrefixRanges)
				}
				if want := len(tc.l.FilterChains) * MaxPrefixRanges; n != want {
					t.Errorf("%d ranges decoded, want %d", n, want)
				}
			case err == nil || err.Error() != tc.want:
				t.Fatalf("error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}
