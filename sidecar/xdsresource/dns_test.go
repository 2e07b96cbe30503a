package xdsresource_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// decodeDNSListener decodes an outbound listener carrying md as "weft.dns".
func decodeDNSListener(t *testing.T, md *structpb.Struct) (*xdsresource.Listener, error) {
	t.Helper()
	l := dt.WithDNS(dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "r"), md)
	_, v, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(l))
	if err != nil {
		return nil, err
	}
	return v.(*xdsresource.Listener), nil
}

func TestDecodeDNS(t *testing.T) {
	l, err := decodeDNSListener(t, dt.DNSMetadata("cluster.local", map[string][]string{
		"reviews.shop.svc.cluster.local": {"fd00::1", "240.240.0.2", "240.240.0.1"},
		"db.data.svc.cluster.local":      {"::ffff:240.240.0.9"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := &xdsresource.DNSTable{Domain: "cluster.local", Hosts: []xdsresource.DNSHost{
		{Name: "db.data.svc.cluster.local", Addrs: []netip.Addr{netip.MustParseAddr("240.240.0.9")}}, // unmapped
		{Name: "reviews.shop.svc.cluster.local", Addrs: []netip.Addr{ // sorted, v4 first
			netip.MustParseAddr("240.240.0.1"), netip.MustParseAddr("240.240.0.2"), netip.MustParseAddr("fd00::1")}},
	}}
	if diff := cmp.Diff(want, l.DNS, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
	// No metadata: no table. A domain without hosts: an empty table.
	if l, err := decodeDNSListener(t, nil); err != nil || l.DNS != nil {
		t.Fatalf("no metadata: %v, %+v", err, l)
	}
	l, err = decodeDNSListener(t, &structpb.Struct{Fields: map[string]*structpb.Value{"domain": structpb.NewStringValue("weft_td.example")}})
	if err != nil || l.DNS == nil || l.DNS.Domain != "weft_td.example" || len(l.DNS.Hosts) != 0 {
		t.Fatalf("domain only: %v, %+v", err, l)
	}
}

func TestDecodeDNSErrors(t *testing.T) {
	const f = `listener "outbound": metadata.filter_metadata["weft.dns"]`
	host := func(addrs ...any) *structpb.Struct {
		l, err := structpb.NewList(addrs)
		if err != nil {
			t.Fatal(err)
		}
		return &structpb.Struct{Fields: map[string]*structpb.Value{
			"domain": structpb.NewStringValue("cluster.local"),
			"hosts":  structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a.b.svc.cluster.local": structpb.NewListValue(l)}}),
		}}
	}
	named := func(name string) *structpb.Struct {
		return dt.DNSMetadata("cluster.local", map[string][]string{name: {"240.240.0.1"}})
	}
	raw := func(fields map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name string
		md   *structpb.Struct
		want string
	}{
		{"unknown field", raw(map[string]any{"domain": "cluster.local", "ttl": 5}), f + `: unknown field "ttl"`},
		{"no domain", raw(map[string]any{"hosts": map[string]any{}}), f + `.domain: required`},
		{"domain not a string", raw(map[string]any{"domain": 1}), f + `.domain: must be a string`},
		{"domain upper case", raw(map[string]any{"domain": "Cluster.local"}), f + `.domain: "Cluster.local": only lower-case letters, digits and '-' are allowed in labels`},
		{"domain trailing dot", raw(map[string]any{"domain": "cluster.local."}), f + `.domain: "cluster.local.": labels must be 1..63 bytes`},
		{"hosts not an object", raw(map[string]any{"domain": "cluster.local", "hosts": []any{"x"}}), f + `.hosts: must be an object {fqdn: [address, ...]}`},
		{"not a service name", named("reviews.svc.cluster.local"), f + `.hosts["reviews.svc.cluster.local"]: want <service>.<namespace>.svc.cluster.local`},
		{"other domain", named("reviews.shop.svc.example.org"), f + `.hosts["reviews.shop.svc.example.org"]: want <service>.<namespace>.svc.cluster.local`},
		{"trailing dot", named("reviews.shop.svc.cluster.local."), f + `.hosts["reviews.shop.svc.cluster.local."]: labels must be 1..63 bytes`},
		{"upper case", named("Reviews.shop.svc.cluster.local"), f + `.hosts["Reviews.shop.svc.cluster.local"]: only lower-case letters, digits and '-' are allowed in labels`},
		{"underscore in service", named("re_views.shop.svc.cluster.local"), f + `.hosts["re_views.shop.svc.cluster.local"]: only lower-case letters, digits and '-' are allowed in labels`},
		{"hyphen at start", named("-r.shop.svc.cluster.local"), f + `.hosts["-r.shop.svc.cluster.local"]: a label must not start or end with '-'`},
		{"label too long", named(strings.Repeat("a", 64) + ".shop.svc.cluster.local"), f + `.hosts["` + strings.Repeat("a", 64) + `..."]: labels must be 1..63 bytes`},
		{"not a list", raw(map[string]any{"domain": "cluster.local", "hosts": map[string]any{"a.b.svc.cluster.local": "240.240.0.1"}}),
			f + `.hosts["a.b.svc.cluster.local"]: must be a list of IP address strings`},
		{"no addresses", host(), f + `.hosts["a.b.svc.cluster.local"]: want 1..16 addresses, got 0`},
		{"address not a string", host("240.240.0.1", 7), f + `.hosts["a.b.svc.cluster.local"][1]: must be an IP address string`},
		{"address a name", host("reviews"), f + `.hosts["a.b.svc.cluster.local"][0]: "reviews" is not an IP address literal`},
		{"address with zone", host("fe80::1%eth0"), f + `.hosts["a.b.svc.cluster.local"][0]: "fe80::1%eth0" is not an IP address literal`},
		{"unspecified", host("0.0.0.0"), f + `.hosts["a.b.svc.cluster.local"][0]: 0.0.0.0 is unspecified`},
		{"repeated", host("240.240.0.1", "::ffff:240.240.0.1"), f + `.hosts["a.b.svc.cluster.local"][1]: 240.240.0.1 repeated`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeDNSListener(t, tc.md)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
			if !errors.Is(err, xdsresource.ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid (a NACK)", err)
			}
		})
	}
}

// TestDecodeDNSBounds decodes tables at each bound and one past it.
func TestDecodeDNSBounds(t *testing.T) {
	addrs := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("240.240.0.%d", i+1))
		}
		return out
	}
	for _, n := range []int{xdsresource.MaxDNSAddrsPerHost, xdsresource.MaxDNSAddrsPerHost + 1} {
		_, err := decodeDNSListener(t, dt.DNSMetadata("cluster.local", map[string][]string{"a.b.svc.cluster.local": addrs(n)}))
		if ok := n <= xdsresource.MaxDNSAddrsPerHost; ok != (err == nil) {
			t.Fatalf("%d addresses: %v", n, err)
		} else if !ok && !strings.HasSuffix(err.Error(), fmt.Sprintf("want 1..16 addresses, got %d", n)) {
			t.Fatalf("%d addresses: %v", n, err)
		}
	}
	for _, n := range []int{xdsresource.MaxDNSHosts, xdsresource.MaxDNSHosts + 1} {
		hosts := make(map[string][]string, n)
		for i := range n {
			hosts[fmt.Sprintf("s%d.ns.svc.cluster.local", i)] = []string{netip.AddrFrom4([4]byte{240, 240, byte(i >> 8), byte(i)}).String()}
		}
		l, err := decodeDNSListener(t, dt.DNSMetadata("cluster.local", hosts))
		switch {
		case n <= xdsresource.MaxDNSHosts && (err != nil || len(l.DNS.Hosts) != n):
			t.Fatalf("%d hosts: %v", n, err)
		case n > xdsresource.MaxDNSHosts && (err == nil || !strings.HasSuffix(err.Error(), `.hosts: 16385 hosts, limit 16384`)):
			t.Fatalf("%d hosts: %v", n, err)
		}
	}
	// The longest name: 253 bytes.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + ".svc." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57)
	if len(long) != xdsresource.MaxDNSNameBytes {
		t.Fatalf("test name is %d bytes", len(long))
	}
	domain := long[strings.Index(long, ".svc.")+5:]
	if _, err := decodeDNSListener(t, dt.DNSMetadata(domain, map[string][]string{long: {"240.240.0.1"}})); err != nil {
		t.Fatalf("253 bytes: %v", err)
	}
	if _, err := decodeDNSListener(t, dt.DNSMetadata(domain+"d", map[string][]string{long + "d": {"240.240.0.1"}})); err == nil ||
		!strings.HasSuffix(err.Error(), ": must be 1..253 bytes") {
		t.Fatalf("254 bytes: %v", err)
	}
}

// FuzzDecodeDNS decodes arbitrary JSON as the "weft.dns" Struct: no panic, an
// error always names the field and wraps ErrInvalid, and a table that decodes
// keeps every bound and invariant (sorted, unique, Service names).
func FuzzDecodeDNS(f *testing.F) {
	for _, s := range []string{
		`{"domain": "cluster.local", "hosts": {"reviews.shop.svc.cluster.local": ["240.240.0.1", "fd00::1"]}}`,
		`{"domain": "cluster.local", "hosts": {"a.b.svc.cluster.local": ["::ffff:10.0.0.1", "10.0.0.1"]}}`,
		`{"domain": "cluster.local", "hosts": {"a.svc.cluster.local": ["10.0.0.1"]}}`,
		`{"domain": "td_1.example", "hosts": {}}`,
		`{"domain": 1}`, `{"hosts": []}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		md := &structpb.Struct{}
		if err := md.UnmarshalJSON(b); err != nil {
			return
		}
		l, err := decodeDNSListener(t, md)
		if err != nil {
			if !errors.Is(err, xdsresource.ErrInvalid) || !strings.Contains(err.Error(), `metadata.filter_metadata["weft.dns"]`) {
				t.Fatalf("error %v: not a field error", err)
			}
			return
		}
		d := l.DNS
		if d == nil || len(d.Hosts) > xdsresource.MaxDNSHosts {
			t.Fatalf("table %+v", d)
		}
		for i, h := range d.Hosts {
			if i > 0 && d.Hosts[i-1].Name >= h.Name {
				t.Fatalf("hosts not sorted and unique: %q, %q", d.Hosts[i-1].Name, h.Name)
			}
			p, ok := strings.CutSuffix(h.Name, ".svc."+d.Domain)
			if !ok || strings.Count(p, ".") != 1 || len(h.Name) > xdsresource.MaxDNSNameBytes {
				t.Fatalf("host name %q under %q", h.Name, d.Domain)
			}
			if len(h.Addrs) == 0 || len(h.Addrs) > xdsresource.MaxDNSAddrsPerHost {
				t.Fatalf("%q: %d addresses", h.Name, len(h.Addrs))
			}
			for j, a := range h.Addrs {
				if !a.IsValid() || a.Is4In6() || a.Zone() != "" || j > 0 && h.Addrs[j-1].Compare(a) >= 0 {
					t.Fatalf("%q: addresses %v", h.Name, h.Addrs)
				}
			}
		}
	})
}
