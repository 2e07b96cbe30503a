package gen

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
)

// validateAll runs go-control-plane's generated validation (Envoy's proto
// constraints) over every resource of s.
func validateAll(t testing.TB, s *snapshot.Snapshot) {
	t.Helper()
	for typ, byName := range s.Resources {
		for name, r := range byName {
			m, err := r.Any.UnmarshalNew()
			if err != nil {
				t.Fatalf("%s %s: %v", typ, name, err)
			}
			if v, ok := m.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("%s %s: go-control-plane validation: %v", typ, name, err)
				}
			}
		}
	}
}

// chainView is a chain's match as a line: "name port prefixes".
func chainView(fc *listenerv3.FilterChain) string {
	m := fc.GetFilterChainMatch()
	var ps []string
	for _, r := range m.GetPrefixRanges() {
		ps = append(ps, fmt.Sprintf("%s/%d", r.GetAddressPrefix(), r.GetPrefixLen().GetValue()))
	}
	return fmt.Sprintf("%s %d %s", fc.GetName(), m.GetDestinationPort().GetValue(), strings.Join(ps, ","))
}

func svcWith(ns, name string, addrs []string, ports ...*ir.Port) *ir.Service {
	s := &ir.Service{Namespace: ns, Name: name, Host: ir.ServiceHost(name, ns, ir.DefaultTrustDomain), Addresses: addrs}
	for _, p := range ports {
		cp := *p
		cp.Cluster = ir.OutboundClusterName(p.Port, "", s.Host)
		s.Ports = append(s.Ports, &cp)
	}
	return s
}

// The outbound chains of the wire, line by line: which chain a VIP:port
// takes, the order explicit apps rely on (HTTP, own namespace's TCP, others),
// VIP-less services (explicit only), and the default chain by policy.
func TestOutboundWireChains(t *testing.T) {
	http := &ir.Port{Name: "http", Port: 80, TargetPort: 80, Protocol: ir.ProtocolHTTP}
	tcp := &ir.Port{Name: "tcp", Port: 80, TargetPort: 80, Protocol: ir.ProtocolTCP}
	tcp5432 := &ir.Port{Name: "pg", Port: 5432, TargetPort: 5432, Protocol: ir.ProtocolTCP}
	for _, tc := range []struct {
		name        string
		policy      string
		scope       []*ir.Service
		want        []string
		wantDefault string
	}{
		{name: "empty scope still has the listener", wantDefault: "PassthroughFilterChain"},
		{name: "registry only", policy: ir.OutboundRegistryOnly, wantDefault: "BlackHoleFilterChain"},
		{
			name: "HTTP VIPs of a port in one chain, sorted, v4 then v6",
			scope: []*ir.Service{
				svcWith("a", "x", []string{"240.240.0.9", "fd00::1"}, http),
				svcWith("a", "y", []string{"240.240.0.2"}, http),
			},
			want:        []string{"outbound|80 80 240.240.0.2/32,240.240.0.9/32,fd00::1/128"},
			wantDefault: "PassthroughFilterChain",
		},
		{
			name: "TCP by VIP beside HTTP; own namespace's TCP before others",
			scope: []*ir.Service{
				svcWith("a", "web", []string{"240.240.0.1"}, http),
				svcWith("b", "db", []string{"240.240.0.3"}, tcp),
				svcWith("own", "db", []string{"240.240.0.2"}, tcp),
			},
			want: []string{
				"outbound|80 80 240.240.0.1/32",
				"outbound|80|tcp|db.own 80 240.240.0.2/32",
				"outbound|80|tcp|db.b 80 240.240.0.3/32",
			},
			wantDefault: "PassthroughFilterChain",
		},
		{
			name: "VIP-less services: explicit only, one per port, none beside HTTP",
			scope: []*ir.Service{
				svcWith("a", "web", nil, http),
				svcWith("a", "old", nil, tcp),
				svcWith("a", "pg1", nil, tcp5432),
				svcWith("a", "pg2", nil, tcp5432),
				svcWith("a", "pg3", []string{"240.240.0.7"}, tcp5432),
			},
			want: []string{
				"outbound|80 80 127.0.0.1/32",
				"outbound|5432|tcp|pg1.a 5432 127.0.0.1/32",
				"outbound|5432|tcp|pg3.a 5432 240.240.0.7/32",
			},
			wantDefault: "PassthroughFilterChain",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mesh := &ir.Mesh{TrustDomain: ir.DefaultTrustDomain, OutboundPolicy: tc.policy}
			if tc.policy == "" {
				mesh.OutboundPolicy = ir.OutboundAllowAny
			}
			lis, _, err := outbound(mesh, "own", tc.scope, true)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fc := range lis.GetFilterChains() {
				got = append(got, chainView(fc))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("chains:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if d := lis.GetDefaultFilterChain(); d.GetName() != tc.wantDefault || d.GetFilterChainMatch() != nil {
				t.Errorf("default chain %q (match %v), want %q", d.GetName(), d.GetFilterChainMatch(), tc.wantDefault)
			}
		})
	}
}

// The DNS name table: every scoped Service with VIPs by lower-case FQDN.
func TestDNSMetadata(t *testing.T) {
	scope := []*ir.Service{
		svcWith("shop", "reviews", []string{"240.240.0.1", "fd00::1"}),
		svcWith("shop", "novip", nil),
	}
	md, err := dnsMetadata("shop", "Cluster.Local", scope)
	if err != nil {
		t.Fatal(err)
	}
	st := md.GetFilterMetadata()[DNSMetadataKey]
	if d := st.GetFields()["domain"].GetStringValue(); d != "cluster.local" {
		t.Errorf("domain %q", d)
	}
	hosts := st.GetFields()["hosts"].GetStructValue().GetFields()
	if len(hosts) != 1 {
		t.Fatalf("hosts %v, want only reviews", hosts)
	}
	var got []string
	for _, v := range hosts["reviews.shop.svc.cluster.local"].GetListValue().GetValues() {
		got = append(got, v.GetStringValue())
	}
	if !slices.Equal(got, []string{"240.240.0.1", "fd00::1"}) {
		t.Errorf("reviews: %v", got)
	}
}

// Bounds the sidecar puts on the wire, at the bound and one past it.
func TestWireBounds(t *testing.T) {
	addrs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = netip.AddrFrom4([4]byte{240, 240, byte(i >> 8), byte(i)}).String()
		}
		return out
	}
	t.Run("addresses per DNS name", func(t *testing.T) {
		if _, err := dnsMetadata("ns", "cluster.local", []*ir.Service{svcWith("ns", "s", addrs(MaxDNSAddrsPerHost))}); err != nil {
			t.Fatalf("at the bound: %v", err)
		}
		_, err := dnsMetadata("ns", "cluster.local", []*ir.Service{svcWith("ns", "s", addrs(MaxDNSAddrsPerHost+1))})
		if want := "outbound listener of namespace ns: DNS name s.ns.svc.cluster.local has 17 addresses, limit 16"; err == nil || err.Error() != want {
			t.Fatalf("past the bound: %v, want %s", err, want)
		}
	})
	t.Run("DNS names", func(t *testing.T) {
		scope := make([]*ir.Service, MaxDNSHosts+1)
		for i := range scope {
			scope[i] = svcWith("ns", fmt.Sprintf("s%d", i), []string{"240.240.0.1"})
		}
		if _, err := dnsMetadata("ns", "cluster.local", scope[:MaxDNSHosts]); err != nil {
			t.Fatalf("at the bound: %v", err)
		}
		_, err := dnsMetadata("ns", "cluster.local", scope)
		if want := "outbound listener of namespace ns: 16385 DNS names in scope, limit 16384"; err == nil || err.Error() != want {
			t.Fatalf("past the bound: %v, want %s", err, want)
		}
	})
	chain := func(name string, n int) *listenerv3.FilterChain {
		ps := make([]netip.Prefix, n)
		for i := range ps {
			ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
		}
		return &listenerv3.FilterChain{Name: name, FilterChainMatch: vipMatch(80, ps)}
	}
	t.Run("prefix ranges per chain", func(t *testing.T) {
		if err := checkPrefixBounds("ns", []*listenerv3.FilterChain{chain("c", MaxChainPrefixRanges)}); err != nil {
			t.Fatalf("at the bound: %v", err)
		}
		err := checkPrefixBounds("ns", []*listenerv3.FilterChain{chain("c", MaxChainPrefixRanges+1)})
		if want := "outbound listener of namespace ns: chain c has 65537 VIPs, limit 65536"; err == nil || err.Error() != want {
			t.Fatalf("past the bound: %v, want %s", err, want)
		}
	})
	t.Run("prefix ranges per listener", func(t *testing.T) {
		full := chain("a", MaxChainPrefixRanges)
		if err := checkPrefixBounds("ns", []*listenerv3.FilterChain{full, full}); err != nil {
			t.Fatalf("at the bound: %v", err)
		}
		err := checkPrefixBounds("ns", []*listenerv3.FilterChain{full, full, chain("b", 1)})
		if want := "outbound listener of namespace ns: 131073 VIPs in its chains, limit 131072"; err == nil || err.Error() != want {
			t.Fatalf("past the bound: %v, want %s", err, want)
		}
	})
}

// An explicit sidecar's chains go by port alone, one per port (HTTP, else the
// first TCP service, own namespace first), with no default chain; its
// listener still carries the name table.
func TestOutboundExplicitChains(t *testing.T) {
	http := &ir.Port{Name: "http", Port: 80, TargetPort: 80, Protocol: ir.ProtocolHTTP}
	tcp := &ir.Port{Name: "tcp", Port: 80, TargetPort: 80, Protocol: ir.ProtocolTCP}
	tcp5432 := &ir.Port{Name: "pg", Port: 5432, TargetPort: 5432, Protocol: ir.ProtocolTCP}
	mesh := &ir.Mesh{TrustDomain: ir.DefaultTrustDomain, OutboundPolicy: ir.OutboundAllowAny}
	if lis, rcs, err := outbound(mesh, "own", nil, false); lis != nil || rcs != nil || err != nil {
		t.Fatalf("empty scope: %v %v %v, want no listener", lis, rcs, err)
	}
	scope := []*ir.Service{
		svcWith("a", "web", []string{"240.240.0.1"}, http),
		svcWith("a", "db", []string{"240.240.0.3"}, tcp),
		svcWith("b", "pg", []string{"240.240.0.4"}, tcp5432),
		svcWith("own", "pg", []string{"240.240.0.2"}, tcp5432),
	}
	lis, _, err := outbound(mesh, "own", scope, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fc := range lis.GetFilterChains() {
		got = append(got, chainView(fc))
	}
	want := []string{"outbound|80 80 ", "outbound|5432|tcp|pg.own 5432 "}
	if !slices.Equal(got, want) {
		t.Errorf("chains:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := lis.GetDefaultFilterChain(); d != nil {
		t.Errorf("default chain %q, want none", d.GetName())
	}
	if lis.GetMetadata().GetFilterMetadata()[DNSMetadataKey] == nil {
		t.Error("no name table")
	}
}
