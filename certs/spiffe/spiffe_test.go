package spiffe

import (
	"crypto/x509"
	"math/big"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWorkload(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	for _, tc := range []struct {
		td, ns, sa string
		want       string
		err        string
	}{
		{"cluster.local", "shop", "reviews", "spiffe://cluster.local/ns/shop/sa/reviews", ""},
		{"cluster.local", long, "a-1", "spiffe://cluster.local/ns/" + long + "/sa/a-1", ""},
		{"cluster.local", long + "a", "x", "", "namespace: 64 characters, over 63"},
		{"cluster.local", "", "x", "", "namespace: empty"},
		{"cluster.local", "shop", "", "", "service account: empty"},
		{"cluster.local", "Shop", "x", "", "namespace: \"Shop\" is not a DNS-1123 label"},
		{"cluster.local", "-a", "x", "", "not a DNS-1123"},
		{"cluster.local", "a-", "x", "", "not a DNS-1123"},
		{"cluster.local", "a", "x/y", "", "service account: \"x/y\""},
		{"Bad TD", "a", "b", "", "trust domain \"Bad TD\""},
	} {
		id, err := Workload(tc.td, tc.ns, tc.sa)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Workload(%q,%q,%q) err = %v, want %q", tc.td, tc.ns, tc.sa, err, tc.err)
			}
			continue
		}
		if err != nil || id.String() != tc.want {
			t.Errorf("Workload(%q,%q,%q) = %v, %v; want %s", tc.td, tc.ns, tc.sa, id, err, tc.want)
		}
		ns, sa, err := ParseWorkload(id)
		if err != nil || ns != tc.ns || sa != tc.sa {
			t.Errorf("ParseWorkload(%s) = %q %q %v", id, ns, sa, err)
		}
	}
}

func TestPilotPublisher(t *testing.T) {
	p, err := Pilot("td")
	if err != nil || p.String() != "spiffe://td/weft/pilot" {
		t.Fatalf("Pilot = %v %v", p, err)
	}
	q, err := Publisher("td")
	if err != nil || q.String() != "spiffe://td/weft/publisher" {
		t.Fatalf("Publisher = %v %v", q, err)
	}
	if _, _, err := ParseWorkload(p); err == nil || !strings.Contains(err.Error(), "spiffe://td/weft/pilot: not a workload") {
		t.Fatalf("ParseWorkload(pilot) err = %v", err)
	}
	if _, err := Pilot("UPPER"); err == nil {
		t.Fatal("Pilot accepted a bad trust domain")
	}
}

func TestParseWorkloadRefusals(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("td")
	for _, segs := range [][]string{
		{"ns", "a", "sa"},
		{"ns", "a", "sa", "b", "x"},
		{"nx", "a", "sa", "b"},
		{"ns", "a", "sx", "b"},
		{"ns", "A_", "sa", "b"},
		{"ns", "a", "sa", "B"},
	} {
		id, err := spiffeid.FromSegments(td, segs...)
		if err != nil {
			continue // not even a SPIFFE ID
		}
		if _, _, err := ParseWorkload(id); err == nil {
			t.Errorf("ParseWorkload(%s) accepted", id)
		}
	}
}

func TestFromCert(t *testing.T) {
	u := func(s string) *url.URL { x, _ := url.Parse(s); return x }
	for _, tc := range []struct {
		uris []*url.URL
		want string
		err  string
	}{
		{[]*url.URL{u("spiffe://td/ns/a/sa/b")}, "spiffe://td/ns/a/sa/b", ""},
		{nil, "", "no URI SAN"},
		{[]*url.URL{u("spiffe://td/a"), u("spiffe://td/b")}, "", "2 URI SANs, want exactly one"},
		{[]*url.URL{u("https://td/a")}, "", "URI SAN \"https://td/a\""},
	} {
		c := &x509.Certificate{SerialNumber: big.NewInt(0xab), URIs: tc.uris}
		id, err := FromCert(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "serial ab") {
				t.Errorf("FromCert(%v) err = %v, want %q", tc.uris, err, tc.err)
			}
			continue
		}
		if err != nil || id.String() != tc.want {
			t.Errorf("FromCert(%v) = %v %v", tc.uris, id, err)
		}
	}
}
