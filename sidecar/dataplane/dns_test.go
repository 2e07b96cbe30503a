package dataplane_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// meshHosts is the name table of the DNS tests: two Services in shop (one
// dual-stack, one IPv6 only), one in data.
var meshHosts = map[string][]string{
	"reviews.shop.svc.cluster.local": {"240.240.0.1", "240.240.0.2", "fd00::1"},
	"v6only.shop.svc.cluster.local":  {"fd00::2"},
	"db.data.svc.cluster.local":      {"240.240.0.9"},
}

func dnsConfig(t testing.TB, hosts map[string][]string) *dataplane.Config {
	t.Helper()
	r := base()
	dt.WithDNS(r[xdsresource.ListenerType][0].(*listenerv3.Listener), dt.DNSMetadata("cluster.local", hosts))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDNSLookup: every form of a name, line by line, from a pod in namespace
// shop, as a Kubernetes search path (shop.svc.cluster.local svc.cluster.local
// cluster.local) would produce them.
func TestDNSLookup(t *testing.T) {
	tab := dnsConfig(t, meshHosts).DNS()
	if tab.Domain() != "cluster.local" || tab.Len() != 3 || tab.Listener() != "outbound" {
		t.Fatalf("table %q %d %q", tab.Domain(), tab.Len(), tab.Listener())
	}
	const rev, db = "reviews.shop.svc.cluster.local", "db.data.svc.cluster.local"
	tests := []struct {
		q, ns string
		want  dataplane.DNSResult
		host  string
	}{
		{"reviews.shop.svc.cluster.local.", "shop", dataplane.DNSFound, rev},
		{"reviews.shop.svc.cluster.local", "shop", dataplane.DNSFound, rev},
		{"REVIEWS.Shop.SVC.cluster.LOCAL.", "shop", dataplane.DNSFound, rev},
		{"reviews.shop.svc.", "shop", dataplane.DNSFound, rev},
		{"reviews.shop.svc", "other", dataplane.DNSFound, rev},
		{"reviews.shop.", "shop", dataplane.DNSFound, rev},
		{"reviews.shop", "other", dataplane.DNSFound, rev},
		{"reviews.", "shop", dataplane.DNSFound, rev},
		{"reviews", "shop", dataplane.DNSFound, rev},
		{"reviews.", "data", dataplane.DNSForward, ""}, // not a Service of data
		{"reviews.", "", dataplane.DNSForward, ""},
		{"db.data.svc.cluster.local.", "shop", dataplane.DNSFound, db},
		{"db.data.", "shop", dataplane.DNSFound, db},
		{"db.", "data", dataplane.DNSFound, db},
		{"db.", "shop", dataplane.DNSForward, ""},
		// The search list walked from shop: the name with each suffix appended.
		{"reviews.shop.shop.svc.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"reviews.shop.svc.cluster.local.shop.svc.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"reviews.shop.svc.shop.svc.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"reviews.shop.svc.svc.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"reviews.shop.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"reviews.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"db.data.shop.svc.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		{"db.data.svc.cluster.local.cluster.local.", "shop", dataplane.DNSNXDomain, ""},
		// A namespace's own name is the parent of its Services: not NXDOMAIN.
		{"reviews.svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"shop.svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"cluster.local.", "shop", dataplane.DNSForward, ""},
		// Not mesh names: the pod's resolvers answer.
		{"ratings.shop.svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"ratings.shop.", "shop", dataplane.DNSForward, ""},
		{"ratings.shop.shop.svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"reviews.shop.example.com.", "shop", dataplane.DNSForward, ""},
		{"example.com.", "shop", dataplane.DNSForward, ""},
		{"www.reviews.shop.svc.cluster.local.", "shop", dataplane.DNSForward, ""},
		{"reviews.shop.svc.cluster.", "shop", dataplane.DNSForward, ""},
		{"reviews.shop.cluster.", "shop", dataplane.DNSForward, ""},
		{`reviews\.shop.svc.cluster.local.`, "shop", dataplane.DNSForward, ""},
		{".", "shop", dataplane.DNSForward, ""},
		{"..0", "0", dataplane.DNSForward, ""}, // empty labels (never from the wire): no panic
		{"a..svc", "shop", dataplane.DNSForward, ""},
		{"", "shop", dataplane.DNSForward, ""},
		{strings.Repeat("a.", 127), "shop", dataplane.DNSForward, ""},
	}
	for _, tc := range tests {
		h, got := tab.Lookup(tc.q, tc.ns)
		name := ""
		if h != nil {
			name = h.Name
		}
		if got != tc.want || name != tc.host {
			t.Errorf("Lookup(%q, %q) = %s %q, want %s %q", tc.q, tc.ns, got, name, tc.want, tc.host)
		}
	}
	h := tab.Host("reviews.shop.svc.cluster.local")
	if len(h.A) != 2 || !h.A[0].Equal(net.IPv4(240, 240, 0, 1)) || len(h.A[0]) != 4 || len(h.AAAA) != 1 || len(h.AAAA[0]) != 16 {
		t.Fatalf("reviews: %+v", h)
	}
	if h := tab.Host("v6only.shop.svc.cluster.local"); len(h.A) != 0 || len(h.AAAA) != 1 {
		t.Fatalf("v6only: %+v", h)
	}
}

func TestDNSNilTable(t *testing.T) {
	cfg, err := base().Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tab := cfg.DNS()
	if tab != nil {
		t.Fatalf("no metadata, table %+v", tab)
	}
	if h, r := tab.Lookup("reviews.shop.svc.cluster.local.", "shop"); h != nil || r != dataplane.DNSForward || tab.Len() != 0 ||
		tab.Domain() != "" || tab.Host("x") != nil {
		t.Fatalf("nil table: %v %v", h, r)
	}
	var none *dataplane.Config
	if none.DNS() != nil {
		t.Fatal("nil config has a table")
	}
}

// TestDNSOneTable: two listeners with a table are refused (whose answers?).
func TestDNSOneTable(t *testing.T) {
	r := base()
	md := dt.DNSMetadata("cluster.local", meshHosts)
	dt.WithDNS(r[xdsresource.ListenerType][0].(*listenerv3.Listener), md)
	r.Add(xdsresource.ListenerType, dt.WithDNS(dt.HTTPListener("second", dt.MustAddr("127.0.0.1:15002"), "routes"), md))
	_, err := r.Compile(dataplane.Options{})
	if want := `invalid configuration: listener "second": metadata.filter_metadata["weft.dns"]: listener "outbound" has the name table already; one per node`; err == nil || err.Error() != want || !errors.Is(err, dataplane.ErrInvalid) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestDNSLookupAllocs: a lookup, hit or miss, allocates nothing.
func TestDNSLookupAllocs(t *testing.T) {
	tab := dnsConfig(t, meshHosts).DNS()
	for _, q := range []string{"reviews.", "REVIEWS.shop.", "reviews.shop.svc.", "reviews.shop.svc.cluster.local.",
		"reviews.shop.shop.svc.cluster.local.", "example.com.", "shop.svc.cluster.local."} {
		if n := testing.AllocsPerRun(100, func() { tab.Lookup(q, "shop") }); n != 0 {
			t.Errorf("Lookup(%q): %v allocations", q, n)
		}
	}
}

func BenchmarkDNSLookup(b *testing.B) {
	tab := dnsConfig(b, meshHosts).DNS()
	b.ReportAllocs()
	for b.Loop() {
		tab.Lookup("reviews.shop.", "shop")
	}
}

// FuzzDNSLookup checks Lookup against a plain string implementation of the
// same rules on arbitrary names and namespaces.
func FuzzDNSLookup(f *testing.F) {
	tab := dnsConfig(f, meshHosts).DNS()
	for _, s := range []string{"reviews.", "reviews.shop.", "Reviews.Shop.Svc.", "reviews.shop.svc.cluster.local.",
		"reviews.shop.shop.svc.cluster.local.", "reviews.cluster.local", "shop.svc.cluster.local.", "db.data.svc.cluster.local.cluster.local",
		"example.com.", `a\.b.`, "."} {
		f.Add(s, "shop")
	}
	f.Add("db", "data")
	f.Fuzz(func(t *testing.T, q, ns string) {
		h, got := tab.Lookup(q, ns)
		name := ""
		if h != nil {
			name = h.Name
		}
		wantName, want := refLookup(meshHosts, "cluster.local", q, ns)
		if got != want || name != wantName {
			t.Fatalf("Lookup(%q, %q) = %s %q, reference %s %q", q, ns, got, name, want, wantName)
		}
	})
}

func refLookup(hosts map[string][]string, domain, q, ns string) (string, dataplane.DNSResult) {
	q = strings.TrimSuffix(q, ".")
	if q == "" || len(q) > xdsresource.MaxDNSNameBytes || strings.Contains(q, `\`) {
		return "", dataplane.DNSForward
	}
	q = strings.Map(func(r rune) rune { // ASCII only, as DNS (RFC 4343)
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, q)
	resolve := func(n string) string {
		if _, ok := hosts[n]; ok {
			return n
		}
		var key string
		switch dots := strings.Count(n, "."); {
		case n == "":
		case dots == 0 && ns != "":
			key = n + "." + ns + ".svc." + domain
		case dots == 1:
			key = n + ".svc." + domain
		case dots == 2 && strings.HasSuffix(n, ".svc"):
			key = n + "." + domain
		}
		if _, ok := hosts[key]; ok {
			return key
		}
		return ""
	}
	if n := resolve(q); n != "" {
		return n, dataplane.DNSFound
	}
	for _, s := range []string{"." + ns + ".svc." + domain, ".svc." + domain, "." + domain} {
		if s == ".svc."+domain {
			if p, ok := strings.CutSuffix(q, s); ok && p != "" && !strings.Contains(p, ".") {
				return "", dataplane.DNSForward // a namespace
			}
		}
		if ns == "" && s == "."+ns+".svc."+domain {
			continue
		}
		if p, ok := strings.CutSuffix(q, s); ok && resolve(p) != "" {
			return "", dataplane.DNSNXDomain
		}
	}
	return "", dataplane.DNSForward
}
