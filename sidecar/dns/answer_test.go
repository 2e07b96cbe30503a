package dns_test

import (
	"os"
	"path/filepath"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/sidecar/dns"
)

// TestAnswer: the pure query path, line by line.
func TestAnswer(t *testing.T) {
	tab := config(t, meshHosts).DNS()
	edns := func(m *mdns.Msg) *mdns.Msg { m.SetEdns0(4096, false); return m }
	chaos := query("reviews.", mdns.TypeA)
	chaos.Question[0].Qclass = mdns.ClassCHAOS
	resp := query("reviews.", mdns.TypeA)
	resp.Response = true
	update := query("reviews.", mdns.TypeA)
	update.Opcode = mdns.OpcodeUpdate
	tests := []struct {
		name    string
		req     *mdns.Msg
		table   bool
		outcome dns.Outcome
		rcode   int // -1: no reply
		answers int
		ns      int
	}{
		{"A", query("reviews.", mdns.TypeA), true, dns.OutcomeMesh, mdns.RcodeSuccess, 2, 0},
		{"AAAA", query("reviews.", mdns.TypeAAAA), true, dns.OutcomeMesh, mdns.RcodeSuccess, 1, 0},
		{"ANY", query("reviews.", mdns.TypeANY), true, dns.OutcomeMesh, mdns.RcodeSuccess, 3, 0},
		{"NODATA A", query("v6only.shop.", mdns.TypeA), true, dns.OutcomeMesh, mdns.RcodeSuccess, 0, 1},
		{"NODATA SRV", query("reviews.", mdns.TypeSRV), true, dns.OutcomeMesh, mdns.RcodeSuccess, 0, 1},
		{"NXDOMAIN", query("reviews.shop.shop.svc.cluster.local.", mdns.TypeAAAA), true, dns.OutcomeNXDomain, mdns.RcodeNameError, 0, 1},
		{"NXDOMAIN any type", query("reviews.shop.cluster.local.", mdns.TypeTXT), true, dns.OutcomeNXDomain, mdns.RcodeNameError, 0, 1},
		{"not mesh", query("example.com.", mdns.TypeA), true, dns.OutcomeForwarded, -1, 0, 0},
		{"namespace", query("shop.svc.cluster.local.", mdns.TypeA), true, dns.OutcomeForwarded, -1, 0, 0},
		{"no table", query("reviews.", mdns.TypeA), false, dns.OutcomeForwarded, -1, 0, 0},
		{"class CHAOS", chaos, true, dns.OutcomeForwarded, -1, 0, 0},
		{"response", resp, true, dns.OutcomeInvalid, -1, 0, 0},
		{"UPDATE", update, true, dns.OutcomeInvalid, mdns.RcodeNotImplemented, 0, 0},
		{"no question", &mdns.Msg{}, true, dns.OutcomeInvalid, mdns.RcodeFormatError, 0, 0},
		{"EDNS0", edns(query("reviews.", mdns.TypeA)), true, dns.OutcomeMesh, mdns.RcodeSuccess, 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := tab
			if !tc.table {
				tb = nil
			}
			r, o := dns.Answer(tc.req, tb, "shop")
			if o != tc.outcome {
				t.Fatalf("outcome %s, want %s", o, tc.outcome)
			}
			if tc.rcode < 0 {
				if r != nil {
					t.Fatalf("reply %v, want none", r)
				}
				return
			}
			if r == nil || r.Rcode != tc.rcode || len(r.Answer) != tc.answers || len(r.Ns) != tc.ns || r.Id != tc.req.Id || !r.Response {
				t.Fatalf("reply %v", r)
			}
			if (tc.req.IsEdns0() != nil) != (r.IsEdns0() != nil) {
				t.Fatalf("OPT in request %v, in reply %v", tc.req.IsEdns0(), r.IsEdns0())
			}
			if _, err := r.Pack(); err != nil {
				t.Fatalf("pack: %v", err)
			}
		})
	}
	for o := dns.OutcomeMesh; o <= dns.OutcomeInvalid; o++ {
		if o.String() == "unknown" {
			t.Fatalf("outcome %d has no name", o)
		}
	}
}

// FuzzAnswer: any datagram that unpacks gets either no reply or one that
// packs, answers its ID and question, and fits 512 bytes once truncated.
func FuzzAnswer(f *testing.F) {
	tab := config(f, meshHosts).DNS()
	for _, m := range []*mdns.Msg{query("reviews.", mdns.TypeA), query("REVIEWS.shop.svc.", mdns.TypeAAAA),
		query("v6only.shop.", mdns.TypeA), query("reviews.shop.shop.svc.cluster.local.", mdns.TypeA),
		query(longName+".", mdns.TypeAAAA), query(longName+".", mdns.TypeANY), query("example.com.", mdns.TypeMX)} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		m.SetEdns0(4096, true)
		if b, err = m.Pack(); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := new(mdns.Msg)
		if req.Unpack(b) != nil {
			return
		}
		r, o := dns.Answer(req, tab, "shop")
		if r == nil {
			if o != dns.OutcomeForwarded && o != dns.OutcomeInvalid {
				t.Fatalf("no reply with outcome %s", o)
			}
			return
		}
		if r.Id != req.Id || !r.Response || len(req.Question) > 0 && (len(r.Question) != 1 || r.Question[0] != req.Question[0]) {
			t.Fatalf("reply %v to %v", r, req)
		}
		if _, err := r.Pack(); err != nil {
			t.Fatalf("pack: %v (reply %v)", err, r)
		}
		r.Truncate(mdns.MinMsgSize)
		p, err := r.Pack()
		if err != nil || len(p) > mdns.MinMsgSize {
			t.Fatalf("truncated to %d bytes: %v", len(p), err)
		}
	})
}

func TestReadResolvConf(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, ignored, err := dns.ReadResolvConf(write("# pod\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\n" +
		"nameserver fd00::10\noptions ndots:5\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n"))
	if err != nil || ignored != 1 || len(got) != 3 || got[0] != "10.96.0.10:53" || got[1] != "[fd00::10]:53" || got[2] != "10.0.0.3:53" {
		t.Fatalf("%v %d %v", got, ignored, err)
	}
	if got, _, err := dns.ReadResolvConf(write("search x\n")); err != nil || len(got) != 0 {
		t.Fatalf("no nameserver: %v %v", got, err)
	}
	if _, _, err := dns.ReadResolvConf(write("nameserver dns.example\n")); err == nil ||
		err.Error() != `dns: resolv.conf `+filepath.Join(dir, "resolv.conf")+`: nameserver "dns.example" is not an IP address` {
		t.Fatalf("name: %v", err)
	}
	if _, _, err := dns.ReadResolvConf(filepath.Join(dir, "none")); err == nil {
		t.Fatal("missing file read")
	}
	big := make([]byte, dns.MaxResolvConfBytes+1)
	for i := range big {
		big[i] = '#'
	}
	if _, _, err := dns.ReadResolvConf(write(string(big))); err == nil {
		t.Fatal("oversized file read")
	}
}
