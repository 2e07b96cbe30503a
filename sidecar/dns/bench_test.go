package dns_test

import (
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/weft-mesh/weft/sidecar/dns"
)

// BenchmarkAnswer: the pure query path of a mesh name (lookup and the reply
// miekg packs); its allocations are miekg's message and records.
func BenchmarkAnswer(b *testing.B) {
	tab := config(b, meshHosts).DNS()
	req := query("reviews.shop.", mdns.TypeA)
	b.ReportAllocs()
	for b.Loop() {
		if r, o := dns.Answer(req, tab, "shop"); o != dns.OutcomeMesh || len(r.Answer) != 2 {
			b.Fatal(r)
		}
	}
}

// BenchmarkUDPMeshName: one client's round trips to the proxy over loopback UDP.
func BenchmarkUDPMeshName(b *testing.B) {
	p := startProxy(b, dns.Config{})
	co, err := mdns.Dial("udp", p.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer co.Close()
	req := query("reviews.shop.", mdns.TypeA)
	c := &mdns.Client{}
	b.ReportAllocs()
	for b.Loop() {
		r, _, err := c.ExchangeWithConn(req, co)
		if err != nil || len(r.Answer) != 2 {
			b.Fatal(r, err)
		}
	}
}
