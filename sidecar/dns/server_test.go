package dns_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weft-mesh/weft/sidecar/dns"
	"github.com/weft-mesh/weft/tools/testkit"
)

// TestGoResolverMeshNames: Go's own resolver, over UDP and over TCP, gets the
// VIPs of every form of a mesh name, NXDOMAIN for a search-suffixed one, and
// upstream is never asked.
func TestGoResolverMeshNames(t *testing.T) {
	up := startUpstream(t, answerA("192.0.2.1"))
	p := startProxy(t, dns.Config{Upstreams: []string{up.addr}})
	for _, tcp := range []bool{false, true} {
		r := resolver(p.addr, tcp)
		ctx := context.Background()
		for _, name := range []string{"reviews.shop.svc.cluster.local.", "reviews.shop.svc.", "reviews.shop.", "reviews.",
			"REVIEWS.Shop.svc.cluster.local."} {
			got, err := r.LookupNetIP(ctx, "ip", name)
			if err != nil {
				t.Fatalf("tcp=%v %s: %v", tcp, name, err)
			}
			want := []netip.Addr{netip.MustParseAddr("240.240.0.1"), netip.MustParseAddr("240.240.0.2"), netip.MustParseAddr("fd00::1")}
			slices.SortFunc(got, netip.Addr.Compare)
			if !slices.Equal(got, want) {
				t.Fatalf("tcp=%v %s: %v, want %v", tcp, name, got, want)
			}
		}
		// One family only: the other is NODATA, so "ip" still resolves and "ip4" is not found.
		if got, err := r.LookupNetIP(ctx, "ip", "v6only.shop."); err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("fd00::2") {
			t.Fatalf("tcp=%v v6only ip: %v %v", tcp, got, err)
		}
		var dnsErr *net.DNSError
		if _, err := r.LookupNetIP(ctx, "ip4", "v6only.shop."); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Fatalf("tcp=%v v6only ip4: %v", tcp, err)
		}
		if _, err := r.LookupNetIP(ctx, "ip", "reviews.shop.shop.svc.cluster.local."); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Fatalf("tcp=%v search-suffixed: %v", tcp, err)
		}
		if got, err := r.LookupHost(ctx, "db.data."); err != nil || len(got) != 1 || got[0] != "240.240.0.9" {
			t.Fatalf("tcp=%v db.data: %v %v", tcp, got, err)
		}
	}
	if q := up.queries(); len(q) != 0 {
		t.Fatalf("upstream asked %d queries for mesh names, first %s", len(q), qname(q[0].msg))
	}
	st := p.Status()
	// Per transport: 5 names × (A, AAAA) + v6only ×3 + db.data ×2 = 15 mesh; 2 NXDOMAIN.
	if st.Queries["mesh"] != 30 || st.Queries["nxdomain"] != 4 || st.Queries["forwarded"] != 0 {
		t.Fatalf("queries %v", st.Queries)
	}
	if st.Hosts != len(meshHosts) || st.Domain != "cluster.local" || len(st.Addrs) != 1 || st.Addrs[0] != p.addr || st.InFlight != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestMiekgClientAnswers: the records themselves, over UDP and TCP.
func TestMiekgClientAnswers(t *testing.T) {
	p := startProxy(t, dns.Config{})
	for _, network := range []string{"udp", "tcp"} {
		r := exchange(t, network, p.addr, query("Reviews.shop.", mdns.TypeA))
		if r.Rcode != mdns.RcodeSuccess || !r.Authoritative || !r.RecursionAvailable || len(r.Answer) != 2 {
			t.Fatalf("%s A: %v", network, r)
		}
		for i, want := range []string{"240.240.0.1", "240.240.0.2"} {
			a := r.Answer[i].(*mdns.A)
			if a.Hdr.Name != "Reviews.shop." || a.Hdr.Ttl != dns.MeshTTL || a.A.String() != want {
				t.Fatalf("%s A[%d]: %v", network, i, a)
			}
		}
		r = exchange(t, network, p.addr, query("reviews.shop.svc.cluster.local.", mdns.TypeAAAA))
		if len(r.Answer) != 1 || r.Answer[0].(*mdns.AAAA).AAAA.String() != "fd00::1" {
			t.Fatalf("%s AAAA: %v", network, r)
		}
		// NODATA: NOERROR, no answer, the zone's SOA for negative caching.
		for _, qt := range []uint16{mdns.TypeA, mdns.TypeTXT, mdns.TypeMX} {
			r = exchange(t, network, p.addr, query("v6only.shop.", qt))
			if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].(*mdns.SOA).Minttl != dns.NegativeTTL ||
				r.Ns[0].Header().Name != "cluster.local." {
				t.Fatalf("%s v6only %s: %v", network, mdns.TypeToString[qt], r)
			}
		}
		r = exchange(t, network, p.addr, query("reviews.shop.shop.svc.cluster.local.", mdns.TypeA))
		if r.Rcode != mdns.RcodeNameError || !r.Authoritative || len(r.Ns) != 1 {
			t.Fatalf("%s NXDOMAIN: %v", network, r)
		}
		r = exchange(t, network, p.addr, query("reviews.", mdns.TypeANY))
		if len(r.Answer) != 3 {
			t.Fatalf("%s ANY: %v", network, r)
		}
		// EDNS0: the reply carries our OPT, the DO bit copied.
		m := query("reviews.", mdns.TypeA)
		m.SetEdns0(4096, true)
		r = exchange(t, network, p.addr, m)
		if opt := r.IsEdns0(); opt == nil || opt.UDPSize() != dns.MaxUDPSize || !opt.Do() {
			t.Fatalf("%s EDNS0: %v", network, r)
		}
	}
}

// TestTruncation: a mesh answer over 512 bytes is truncated over UDP without
// EDNS0 (TC set), whole with EDNS0 or over TCP; Go's resolver retries on TCP
// by itself and gets all 16.
func TestTruncation(t *testing.T) {
	p := startProxy(t, dns.Config{})
	name := longName + "."
	r := exchange(t, "udp", p.addr, query(name, mdns.TypeAAAA))
	if !r.Truncated || len(r.Answer) >= 16 {
		t.Fatalf("udp without EDNS0: TC=%v, %d answers", r.Truncated, len(r.Answer))
	}
	m := query(name, mdns.TypeAAAA)
	m.SetEdns0(1232, false)
	if r := exchange(t, "udp", p.addr, m); r.Truncated || len(r.Answer) != 16 {
		t.Fatalf("udp with EDNS0: TC=%v, %d answers", r.Truncated, len(r.Answer))
	}
	if r := exchange(t, "tcp", p.addr, query(name, mdns.TypeAAAA)); r.Truncated || len(r.Answer) != 16 {
		t.Fatalf("tcp: TC=%v, %d answers", r.Truncated, len(r.Answer))
	}
	got, err := resolver(p.addr, false).LookupNetIP(context.Background(), "ip6", name)
	if err != nil || len(got) != 16 {
		t.Fatalf("Go resolver: %d addresses, %v", len(got), err)
	}
}

// TestForward: other names go to the upstream over the query's transport
// with the client's EDNS0 record (size lowered to MaxUDPSize), and the
// upstream's answer (its rcode, its OPT) comes back with the client's ID.
func TestForward(t *testing.T) {
	up := startUpstream(t, func(network string, w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "nx.example." {
			m.Rcode = mdns.RcodeNameError
		} else {
			m.Answer = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: r.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A: net.ParseIP("192.0.2.1")}}
		}
		if opt := r.IsEdns0(); opt != nil {
			m.SetEdns0(4000, false)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_LOCAL{Code: 65002, Data: []byte(network)})
		}
		_ = w.WriteMsg(m)
	})
	p := startProxy(t, dns.Config{Upstreams: []string{up.addr}})
	for _, network := range []string{"udp", "tcp"} {
		m := query("www.example.", mdns.TypeA)
		m.Id = 4242
		m.SetEdns0(4096, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_LOCAL{Code: 65001, Data: []byte("client")})
		r := exchange(t, network, p.addr, m)
		if r.Id != 4242 || r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "192.0.2.1" {
			t.Fatalf("%s: %v", network, r)
		}
		opt := r.IsEdns0()
		if opt == nil || len(opt.Option) != 1 || string(opt.Option[0].(*mdns.EDNS0_LOCAL).Data) != network {
			t.Fatalf("%s: upstream's OPT not passed back: %v", network, r)
		}
		seen := up.queries()
		last := seen[len(seen)-1]
		if last.network != network || last.msg.Id == 4242 {
			t.Fatalf("%s: upstream got %s query with id %d", network, last.network, last.msg.Id)
		}
		uo := last.msg.IsEdns0()
		if uo == nil || uo.UDPSize() != dns.MaxUDPSize || len(uo.Option) != 1 || string(uo.Option[0].(*mdns.EDNS0_LOCAL).Data) != "client" {
			t.Fatalf("%s: upstream got OPT %v", network, uo)
		}
		if r := exchange(t, network, p.addr, query("nx.example.", mdns.TypeA)); r.Rcode != mdns.RcodeNameError {
			t.Fatalf("%s: upstream's NXDOMAIN: %v", network, r)
		}
	}
	// Go's resolver through the proxy; a mesh name with a non-mesh search domain is forwarded.
	if got, err := resolver(p.addr, false).LookupHost(context.Background(), "www.example."); err != nil || len(got) != 1 || got[0] != "192.0.2.1" {
		t.Fatalf("Go resolver: %v %v", got, err)
	}
	if r := exchange(t, "udp", p.addr, query("reviews.shop.example.com.", mdns.TypeA)); len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "192.0.2.1" {
		t.Fatalf("reviews.shop.example.com: %v", r)
	}
	if st := p.Status(); st.Queries["forwarded"] != 7 || st.Queries["upstream_error"] != 0 {
		t.Fatalf("queries %v", st.Queries)
	}
}

// TestForwardTruncated: the upstream's truncated UDP answer reaches the
// client with TC, the client's TCP retry is forwarded over TCP, and Go's
// resolver does both by itself.
func TestForwardTruncated(t *testing.T) {
	up := startUpstream(t, func(network string, w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		for i := range 100 {
			m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: r.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A: net.IPv4(192, 0, 2, byte(i+1))})
		}
		if network == "udp" {
			size := mdns.MinMsgSize
			if opt := r.IsEdns0(); opt != nil {
				size = int(opt.UDPSize())
			}
			m.Truncate(size)
		}
		_ = w.WriteMsg(m)
	})
	p := startProxy(t, dns.Config{Upstreams: []string{up.addr}})
	r := exchange(t, "udp", p.addr, query("many.example.", mdns.TypeA))
	if !r.Truncated || len(r.Answer) == 0 || len(r.Answer) >= 100 {
		t.Fatalf("udp: TC=%v %d answers", r.Truncated, len(r.Answer))
	}
	if r := exchange(t, "tcp", p.addr, query("many.example.", mdns.TypeA)); r.Truncated || len(r.Answer) != 100 {
		t.Fatalf("tcp: TC=%v %d answers", r.Truncated, len(r.Answer))
	}
	got, err := resolver(p.addr, false).LookupNetIP(context.Background(), "ip4", "many.example.")
	if err != nil || len(got) != 100 {
		t.Fatalf("Go resolver: %d addresses, %v", len(got), err)
	}
}

// blackhole is a UDP socket that reads and never answers.
func blackhole(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// TestForwardTimeout: a silent upstream costs its share of ForwardTimeout and
// the next one answers; with none answering the client gets SERVFAIL at the
// timeout, counted; with no upstream at all, at once.
func TestForwardTimeout(t *testing.T) {
	up := startUpstream(t, answerA("192.0.2.7"))
	const timeout = 600 * time.Millisecond
	p := startProxy(t, dns.Config{Upstreams: []string{blackhole(t), up.addr}, ForwardTimeout: timeout})
	start := time.Now()
	r := exchange(t, "udp", p.addr, query("www.example.", mdns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "192.0.2.7" {
		t.Fatalf("fallback: %v", r)
	}
	if d := time.Since(start); d < timeout/2 {
		t.Fatalf("answered in %v: the silent upstream was not asked first", d)
	}
	dead := startProxy(t, dns.Config{Upstreams: []string{blackhole(t)}, ForwardTimeout: timeout})
	start = time.Now()
	r = exchange(t, "udp", dead.addr, query("www.example.", mdns.TypeA))
	if d := time.Since(start); r.Rcode != mdns.RcodeServerFailure || d < timeout || d > timeout+time.Second {
		t.Fatalf("silent upstream: %s after %v", mdns.RcodeToString[r.Rcode], d)
	}
	none := startProxy(t, dns.Config{})
	if r := exchange(t, "tcp", none.addr, query("www.example.", mdns.TypeA)); r.Rcode != mdns.RcodeServerFailure {
		t.Fatalf("no upstream: %v", r)
	}
	// Mesh names need no upstream.
	if r := exchange(t, "udp", none.addr, query("reviews.", mdns.TypeA)); len(r.Answer) != 2 {
		t.Fatalf("mesh name without upstream: %v", r)
	}
	if q := dead.Status().Queries; q["upstream_error"] != 1 {
		t.Fatalf("dead: %v", q)
	}
	if q := none.Status().Queries; q["upstream_error"] != 1 || q["mesh"] != 1 {
		t.Fatalf("none: %v", q)
	}
}

// TestMaxInFlight: at the bound every query is served; one past it is
// REFUSED at once and counted; once a slot frees, queries are served again.
func TestMaxInFlight(t *testing.T) {
	const bound = 3
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	up := startUpstream(t, func(_ string, w mdns.ResponseWriter, r *mdns.Msg) {
		<-release
		answerA("192.0.2.1")("", w, r)
	})
	t.Cleanup(free) // before the upstream's cleanup: its handlers must return
	p := startProxy(t, dns.Config{Upstreams: []string{up.addr}, MaxInFlight: bound, ForwardTimeout: 10 * time.Second})
	var wg sync.WaitGroup
	answers := make(chan *mdns.Msg, bound)
	for i := range bound {
		wg.Go(func() {
			network := []string{"udp", "tcp"}[i%2]
			c := &mdns.Client{Net: network, Timeout: 10 * time.Second}
			r, _, err := c.Exchange(query("slow.example.", mdns.TypeA), p.addr)
			if err != nil {
				t.Errorf("query %d at the bound: %v", i, err)
				return
			}
			answers <- r
		})
	}
	testkit.Eventually(t, 5*time.Second, "bound queries in flight", func() bool { return p.Status().InFlight == bound })
	// One past: refused whatever the name, mesh names included.
	for _, network := range []string{"udp", "tcp"} {
		if r := exchange(t, network, p.addr, query("reviews.", mdns.TypeA)); r.Rcode != mdns.RcodeRefused {
			t.Fatalf("%s past the bound: %v", network, r)
		}
	}
	free()
	wg.Wait()
	close(answers)
	n := 0
	for r := range answers {
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("query at the bound: %v", r)
		}
		n++
	}
	if n != bound {
		t.Fatalf("%d of %d answered", n, bound)
	}
	if r := exchange(t, "udp", p.addr, query("reviews.", mdns.TypeA)); len(r.Answer) != 2 {
		t.Fatalf("after the slots freed: %v", r)
	}
	if st := p.Status(); st.Queries["refused"] != 2 || st.Queries["forwarded"] != bound || st.InFlight != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestMaxTCPConns: at the bound every connection is served; one past it is
// closed at accept and counted; closing one frees its slot.
func TestMaxTCPConns(t *testing.T) {
	const bound = 2
	p := startProxy(t, dns.Config{MaxTCPConns: bound})
	var conns []*mdns.Conn
	ask := func(co *mdns.Conn) (*mdns.Msg, error) {
		co.SetDeadline(time.Now().Add(5 * time.Second))
		if err := co.WriteMsg(query("reviews.", mdns.TypeA)); err != nil {
			return nil, err
		}
		return co.ReadMsg()
	}
	dial := func() *mdns.Conn {
		co, err := mdns.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { co.Close() })
		return co
	}
	for i := range bound {
		co := dial()
		if r, err := ask(co); err != nil || len(r.Answer) != 2 {
			t.Fatalf("connection %d at the bound: %v %v", i, r, err)
		}
		conns = append(conns, co)
	}
	past := dial()
	if r, err := ask(past); err == nil {
		t.Fatalf("connection past the bound answered: %v", r)
	}
	if st := p.Status(); st.TCPRefused != 1 || st.TCPConns != bound {
		t.Fatalf("status %+v", st)
	}
	conns[0].Close()
	testkit.Eventually(t, 5*time.Second, "slot freed", func() bool { return p.Status().TCPConns == bound-1 })
	if r, err := ask(dial()); err != nil || len(r.Answer) != 2 {
		t.Fatalf("after a slot freed: %v %v", r, err)
	}
	// Pipelined queries on the kept connection still work.
	if r, err := ask(conns[1]); err != nil || len(r.Answer) != 2 {
		t.Fatalf("second query on a kept connection: %v %v", r, err)
	}
}

// TestActiveSnapshot: every query reads the active configuration: a swap
// changes the answers at once, and with no configuration (or no table) every
// name is forwarded.
func TestActiveSnapshot(t *testing.T) {
	up := startUpstream(t, answerA("192.0.2.1"))
	snap := newSnapshot(nil)
	p := startProxy(t, dns.Config{Snapshot: snap, Upstreams: []string{up.addr}})
	a := func() string {
		r := exchange(t, "udp", p.addr, query("reviews.shop.", mdns.TypeA))
		var out []string
		for _, rr := range r.Answer {
			out = append(out, rr.(*mdns.A).A.String())
		}
		return strings.Join(out, ",")
	}
	if got := a(); got != "192.0.2.1" {
		t.Fatalf("no configuration: %s", got)
	}
	snap.p.Store(config(t, nil))
	if got := a(); got != "192.0.2.1" {
		t.Fatalf("no table: %s", got)
	}
	snap.p.Store(config(t, meshHosts))
	if got := a(); got != "240.240.0.1,240.240.0.2" {
		t.Fatalf("table: %s", got)
	}
	snap.p.Store(config(t, map[string][]string{"reviews.shop.svc.cluster.local": {"240.240.0.77"}}))
	if got := a(); got != "240.240.0.77" {
		t.Fatalf("after a swap: %s", got)
	}
}

// TestInvalidQueries: what is not a query gets FORMERR, NOTIMP or BADVERS (or
// nothing, for a response), counted as invalid.
func TestInvalidQueries(t *testing.T) {
	p := startProxy(t, dns.Config{})
	two := query("reviews.", mdns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	if r := exchange(t, "udp", p.addr, two); r.Rcode != mdns.RcodeFormatError {
		t.Fatalf("two questions: %v", r)
	}
	notify := query("reviews.", mdns.TypeSOA)
	notify.Opcode = mdns.OpcodeNotify
	if r := exchange(t, "tcp", p.addr, notify); r.Rcode != mdns.RcodeNotImplemented {
		t.Fatalf("NOTIFY: %v", r)
	}
	v1 := query("reviews.", mdns.TypeA)
	v1.SetEdns0(1232, false)
	v1.IsEdns0().SetVersion(1)
	if r := exchange(t, "udp", p.addr, v1); r.Rcode != mdns.RcodeBadVers {
		t.Fatalf("EDNS version 1: %v", r)
	}
	// A response sent to the proxy is dropped: no reply to reflect.
	resp := query("reviews.", mdns.TypeA)
	resp.Response = true
	c := &mdns.Client{Net: "udp", Timeout: 300 * time.Millisecond}
	if r, _, err := c.Exchange(resp, p.addr); err == nil {
		t.Fatalf("a response was answered: %v", r)
	}
	// Garbage too short for a header.
	conn, err := net.Dial("udp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "5 invalid counted", func() bool { return p.Status().Queries["invalid"] == 5 })
}

// TestMetrics: /metrics shows queries by outcome and transport, and the bounds.
func TestMetrics(t *testing.T) {
	p := startProxy(t, dns.Config{MaxInFlight: 7})
	exchange(t, "udp", p.addr, query("reviews.", mdns.TypeA))
	exchange(t, "tcp", p.addr, query("reviews.", mdns.TypeA))
	exchange(t, "tcp", p.addr, query("reviews.shop.shop.svc.cluster.local.", mdns.TypeA))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p.Server)
	want := `
# HELP weft_dns_queries_total DNS queries by outcome (mesh, nxdomain, forwarded, refused, upstream_error, invalid) and transport.
# TYPE weft_dns_queries_total counter
weft_dns_queries_total{outcome="forwarded",transport="tcp"} 0
weft_dns_queries_total{outcome="forwarded",transport="udp"} 0
weft_dns_queries_total{outcome="invalid",transport="tcp"} 0
weft_dns_queries_total{outcome="invalid",transport="udp"} 0
weft_dns_queries_total{outcome="mesh",transport="tcp"} 1
weft_dns_queries_total{outcome="mesh",transport="udp"} 1
weft_dns_queries_total{outcome="nxdomain",transport="tcp"} 1
weft_dns_queries_total{outcome="nxdomain",transport="udp"} 0
weft_dns_queries_total{outcome="refused",transport="tcp"} 0
weft_dns_queries_total{outcome="refused",transport="udp"} 0
weft_dns_queries_total{outcome="upstream_error",transport="tcp"} 0
weft_dns_queries_total{outcome="upstream_error",transport="udp"} 0
# HELP weft_dns_hosts Mesh names in the active configuration's DNS table.
# TYPE weft_dns_hosts gauge
weft_dns_hosts 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "weft_dns_queries_total", "weft_dns_hosts"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP weft_dns_limit The DNS proxy's bounds.
# TYPE weft_dns_limit gauge
weft_dns_limit{limit="forward_timeout_seconds"} 2
weft_dns_limit{limit="max_in_flight"} 7
weft_dns_limit{limit="max_tcp_connections"} 256
weft_dns_limit{limit="max_udp_size_bytes"} 1232
weft_dns_limit{limit="tcp_idle_timeout_seconds"} 8
`), "weft_dns_limit"); err != nil {
		t.Fatal(err)
	}
}

func TestNewErrors(t *testing.T) {
	snap := newSnapshot(nil)
	log := hclogNull()
	tests := []struct {
		cfg  dns.Config
		want string
	}{
		{dns.Config{Snapshot: snap}, "dns: invalid config: Logger required"},
		{dns.Config{Logger: log}, "dns: invalid config: Snapshot required"},
		{dns.Config{Logger: log, Snapshot: snap, MaxInFlight: -1}, "dns: invalid config: MaxInFlight -1 outside 1..1048576"},
		{dns.Config{Logger: log, Snapshot: snap, MaxInFlight: dns.MaxMaxInFlight + 1}, "dns: invalid config: MaxInFlight 1048577 outside 1..1048576"},
		{dns.Config{Logger: log, Snapshot: snap, ForwardTimeout: 31 * time.Second}, "dns: invalid config: ForwardTimeout 31s outside (0, 30s]"},
		{dns.Config{Logger: log, Snapshot: snap, MaxTCPConns: dns.MaxMaxTCPConns + 1}, "dns: invalid config: MaxTCPConns 65537 outside 1..65536"},
		{dns.Config{Logger: log, Snapshot: snap, Upstreams: []string{"a:1", "b:1", "c:1", "d:1"}}, "dns: invalid config: 4 upstreams, limit 3"},
		{dns.Config{Logger: log, Snapshot: snap, Upstreams: []string{"dns.example:53"}}, `dns: invalid config: upstream "dns.example:53": want IP:PORT`},
	}
	for _, tc := range tests {
		if _, err := dns.New(tc.cfg); err == nil || err.Error() != tc.want || !errors.Is(err, dns.ErrConfig) {
			t.Errorf("got %v\nwant %s", err, tc.want)
		}
	}
	// At the bounds.
	if _, err := dns.New(dns.Config{Logger: log, Snapshot: snap, MaxInFlight: dns.MaxMaxInFlight, ForwardTimeout: dns.MaxForwardTimeout,
		MaxTCPConns: dns.MaxMaxTCPConns, Upstreams: []string{"10.0.0.1:53", "[fd00::1]:53", "10.0.0.3:5353"}}); err != nil {
		t.Fatal(err)
	}
}

// TestServeTwoAddresses: one Server on two addresses (as on 127.0.0.1 and
// ::1): both answer, the bounds and counters are shared, Status lists both.
func TestServeTwoAddresses(t *testing.T) {
	s, err := dns.New(dns.Config{Logger: hclogNull(), Snapshot: newSnapshot(config(t, meshHosts)), Namespace: "shop", MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var addrs []string
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		pc, ln, err := dns.Listen(netip.MustParseAddrPort(ip + ":0"))
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		wg.Go(func() {
			if err := s.Serve(ctx, pc, ln); err != nil {
				t.Errorf("Serve %s: %v", ip, err)
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	for _, a := range addrs {
		if r := exchange(t, "udp", a, query("reviews.", mdns.TypeA)); len(r.Answer) != 2 {
			t.Fatalf("%s: %v", a, r)
		}
	}
	st := s.Status()
	slices.Sort(st.Addrs)
	if !slices.Equal(st.Addrs, addrs) || st.Queries["mesh"] != 2 {
		t.Fatalf("status %+v, want addresses %v", st, addrs)
	}
}

// TestStopCutsForwards: stopping the proxy ends a forward in flight at once,
// not at its ForwardTimeout.
func TestStopCutsForwards(t *testing.T) {
	s, err := dns.New(dns.Config{Logger: hclogNull(), Snapshot: newSnapshot(nil), Upstreams: []string{blackhole(t)},
		ForwardTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := dns.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	asked := make(chan error, 1)
	go func() {
		_, _, err := (&mdns.Client{Net: "udp", Timeout: 20 * time.Second}).Exchange(query("slow.example.", mdns.TypeA), ln.Addr().String())
		asked <- err
	}()
	testkit.Eventually(t, 5*time.Second, "forward in flight", func() bool { return s.Status().InFlight == 1 })
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("stopped in %v with a forward in flight", d)
	}
	<-asked // answered SERVFAIL or cut: either way the client is not left waiting
	if q := s.Status().Queries; q["upstream_error"] != 1 {
		t.Fatalf("queries %v", q)
	}
}

// padded is a query for name padded (EDNS0 padding) to exactly size bytes.
func padded(t *testing.T, name string, size int) *mdns.Msg {
	t.Helper()
	m := query(name, mdns.TypeA)
	m.SetEdns0(dns.MaxUDPSize, false)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_PADDING{Padding: make([]byte, size-len(b)-4)})
	if b, err = m.Pack(); err != nil || len(b) != size {
		t.Fatalf("padded query: %d bytes, %v", len(b), err)
	}
	return m
}

// TestUDPQuerySize: a UDP query of MaxUDPReadBytes is answered; one byte
// more is cut by the read buffer and refused as malformed (FORMERR), counted.
func TestUDPQuerySize(t *testing.T) {
	p := startProxy(t, dns.Config{})
	if r := exchange(t, "udp", p.addr, padded(t, "reviews.", dns.MaxUDPReadBytes)); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("%d bytes: %v", dns.MaxUDPReadBytes, r)
	}
	if r := exchange(t, "udp", p.addr, padded(t, "reviews.", dns.MaxUDPReadBytes+1)); r.Rcode != mdns.RcodeFormatError {
		t.Fatalf("%d bytes: %v", dns.MaxUDPReadBytes+1, r)
	}
	if q := p.Status().Queries; q["invalid"] != 1 || q["mesh"] != 1 {
		t.Fatalf("queries %v", q)
	}
}

// TestTCPQueriesPerConn: a client TCP connection gets MaxTCPQueriesPerConn
// answers, then it is closed (the client reconnects).
func TestTCPQueriesPerConn(t *testing.T) {
	p := startProxy(t, dns.Config{})
	co, err := mdns.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	ask := func() error {
		co.SetDeadline(time.Now().Add(5 * time.Second))
		if err := co.WriteMsg(query("reviews.", mdns.TypeA)); err != nil {
			return err
		}
		_, err := co.ReadMsg()
		return err
	}
	for i := range dns.MaxTCPQueriesPerConn {
		if err := ask(); err != nil {
			t.Fatalf("query %d: %v", i+1, err)
		}
	}
	if err := ask(); err == nil {
		t.Fatalf("query %d answered on the same connection", dns.MaxTCPQueriesPerConn+1)
	}
}

// TestTCPIdleTimeout: a client TCP connection idle for TCPIdleTimeout after
// a query is closed by the proxy, and its slot freed.
func TestTCPIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	p := startProxy(t, dns.Config{TCPIdleTimeout: idle})
	co, err := mdns.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	co.SetDeadline(time.Now().Add(5 * time.Second))
	if err := co.WriteMsg(query("reviews.", mdns.TypeA)); err != nil {
		t.Fatal(err)
	}
	if _, err := co.ReadMsg(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = co.ReadMsg() // blocks until the proxy closes (or our 5s deadline)
	if d := time.Since(start); err == nil || d < idle || d > 4*time.Second {
		t.Fatalf("idle connection: %v after %v", err, d)
	}
	testkit.Eventually(t, 5*time.Second, "slot freed", func() bool { return p.Status().TCPConns == 0 })
}
