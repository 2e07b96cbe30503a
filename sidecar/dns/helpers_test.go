package dns_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/hashicorp/go-hclog"
	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/dns"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// meshHosts: reviews in shop (dual-stack), v6only in shop, db in data, and
// longName in shop with 16 IPv6 addresses: 609 bytes as an AAAA answer.
var meshHosts = map[string][]string{
	"reviews.shop.svc.cluster.local": {"240.240.0.1", "240.240.0.2", "fd00::1"},
	"v6only.shop.svc.cluster.local":  {"fd00::2"},
	"db.data.svc.cluster.local":      {"240.240.0.9"},
	longName + ".svc.cluster.local":  wideV6(),
}

var longName = strings.Repeat("l", 63) + "." + strings.Repeat("n", 63)

func wideV6() []string {
	var out []string
	for i := range xdsresource.MaxDNSAddrsPerHost {
		out = append(out, netip.AddrFrom16([16]byte{0xfd, 15: byte(i + 1)}).String())
	}
	return out
}

// config compiles a configuration whose outbound listener carries hosts.
func config(t testing.TB, hosts map[string][]string) *dataplane.Config {
	t.Helper()
	r := dt.Simple("outbound", dt.MustAddr("127.0.0.1:15001"), false, dt.MustAddr("127.0.0.1:9000"))
	if hosts != nil {
		dt.WithDNS(r[xdsresource.ListenerType][0].(*listenerv3.Listener), dt.DNSMetadata("cluster.local", hosts))
	}
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// snapshot is the runtime's active configuration, swapped by tests.
type snapshot struct {
	p atomic.Pointer[dataplane.Config]
}

func (s *snapshot) Load() *dataplane.Config { return s.p.Load() }

func newSnapshot(cfg *dataplane.Config) *snapshot {
	s := &snapshot{}
	s.p.Store(cfg)
	return s
}

// proxy is a running dns.Server on loopback.
type proxy struct {
	*dns.Server
	addr string
}

// startProxy serves cfg (defaults: namespace shop, the mesh table) until the
// test ends.
func startProxy(t testing.TB, cfg dns.Config) *proxy {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Snapshot == nil {
		cfg.Snapshot = newSnapshot(config(t, meshHosts))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "shop"
	}
	s, err := dns.New(cfg)
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &proxy{Server: s, addr: ln.Addr().String()}
}

// upstream is a real miekg DNS server on UDP and TCP standing in for the
// pod's nameserver; it records what it was asked.
type upstream struct {
	addr string
	mu   sync.Mutex
	seen []seenQuery
}

type seenQuery struct {
	network string
	msg     *mdns.Msg
}

func (u *upstream) queries() []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenQuery(nil), u.seen...)
}

// startUpstream serves h (which gets the transport) on a free loopback port.
func startUpstream(t testing.TB, h func(network string, w mdns.ResponseWriter, r *mdns.Msg)) *upstream {
	t.Helper()
	pc, ln, err := dns.Listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: ln.Addr().String()}
	for _, srv := range []*mdns.Server{{PacketConn: pc}, {Listener: ln}} {
		network := "tcp"
		if srv.PacketConn != nil {
			network = "udp"
		}
		srv.Handler = mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
			u.mu.Lock()
			u.seen = append(u.seen, seenQuery{network, r.Copy()})
			u.mu.Unlock()
			h(network, w, r)
		})
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.ActivateAndServe(); err != nil {
				t.Errorf("upstream: %v", err)
			}
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return u
}

// answerA answers every A question with addr, NXDOMAIN for nx.example.
func answerA(addr string) func(string, mdns.ResponseWriter, *mdns.Msg) {
	return func(_ string, w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Name == "nx.example.":
			m.Rcode = mdns.RcodeNameError
		case q.Qtype == mdns.TypeA:
			m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60},
				A: net.ParseIP(addr)})
		}
		_ = w.WriteMsg(m)
	}
}

// exchange sends one query over network ("udp" or "tcp") to addr.
func exchange(t testing.TB, network, addr string, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, qname(m), mdns.TypeToString[m.Question[0].Qtype], err)
	}
	return r
}

func query(name string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

func qname(m *mdns.Msg) string {
	if len(m.Question) == 0 {
		return ""
	}
	return m.Question[0].Name
}

// resolver is Go's own resolver (PreferGo) dialling only the proxy: UDP, or
// TCP for every query when tcp is set (Go frames by the connection's type).
func resolver(addr string, tcp bool) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if tcp {
			network = "tcp"
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func hclogNull() hclog.Logger { return hclog.NewNullLogger() }
