package dataplane_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/weft-mesh/weft/sidecar/authz"
	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

const (
	botID      = "spiffe://cluster.local/ns/t42/sa/bot"
	frontendID = "spiffe://cluster.local/ns/shop/sa/frontend"
)

// authzResources is an inbound listener (HTTP 9080, TCP 3306) with an Override
// blocking the bot (ttl, revision as given), an ALLOW for shop on HTTP, and an
// outbound listener without RBAC.
func authzResources(ttl time.Duration, rev int64) dt.Resources {
	r := dt.Resources{}
	in := dt.Listener("inbound", dt.MustAddr("0.0.0.0:15006"), dt.HTTPChain(9080, "routes"), dt.TCPChain(3306, "backend"))
	block := dt.Policy([]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Principal(botID)})
	dt.WithHTTPFilters(in,
		dt.HTTPRBAC("weft.override", dt.Rules(rbacv3.RBAC_DENY, map[string]*rbacv3.Policy{"shop/block": block}), nil),
		dt.HTTPRBAC("envoy.filters.http.rbac", dt.Rules(rbacv3.RBAC_ALLOW, map[string]*rbacv3.Policy{"shop/shop-only": dt.Policy(
			[]*rbacv3.Permission{dt.AnyPermission()}, []*rbacv3.Principal{dt.Namespace("cluster.local", "shop"), dt.Namespace("cluster.local", "t42")})}), nil))
	dt.WithOverrides(in, dt.OverrideTTL{Name: "shop/block", TTL: ttl, Revision: rev})
	r.Add(xdsresource.ListenerType, in, dt.HTTPListener("outbound", dt.MustAddr("127.0.0.1:15001"), "routes"))
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", dt.VirtualHost("all", []string{"*"}, dt.PrefixRoute("/", "backend", 0))))
	r.Add(xdsresource.ClusterType, dt.EDSCluster("backend", dt.ClusterOpts{}))
	r.Add(xdsresource.EndpointType, dt.Endpoints("backend", dt.MustAddr("127.0.0.1:9")))
	return r
}

func TestCompileAuthz(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := authz.NewState()
	now := t0
	// With a Registry, as the sidecar compiles: only Activate commits.
	o := dataplane.Options{Authz: st, Registry: cluster.NewRegistry(), Now: func() time.Time { return now }}
	cfg, err := authzResources(2*time.Second, 1).Compile(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Activate()
	httpE, tcpE := cfg.Authz("inbound", 9080), cfg.Authz("inbound", 3306)
	if httpE == nil || tcpE == nil {
		t.Fatalf("inbound engines: http %v tcp %v", httpE, tcpE)
	}
	if cfg.Listener("inbound").Chain(3306).TCP.Authz != tcpE {
		t.Error("the TCP route does not carry its chain's engine")
	}
	if e := cfg.Authz("outbound", 9080); e != nil {
		t.Error("outbound chain without RBAC got an engine")
	}
	if cfg.AuthzState() != st {
		t.Error("AuthzState is not Options.Authz")
	}
	// The HTTP chain: bot blocked, frontend allowed, plaintext not allowed.
	for _, c := range []struct {
		id   string
		want authz.Outcome
	}{{botID, authz.DeniedPolicy}, {frontendID, authz.Allowed}, {"", authz.DeniedNoMatch}} {
		if d := httpE.Decide(authz.Request{Principal: c.id, Method: "GET", Path: "/", Port: 9080}, t0); d.Outcome != c.want {
			t.Errorf("http %q: outcome %d (%s), want %d", c.id, d.Outcome, d.Policy, c.want)
		}
	}
	// The TCP chain has no RBAC filter: an empty engine that allows all.
	if !tcpE.Empty() {
		t.Error("TCP chain without network RBAC is not empty")
	}
	// Swaps keep the sighting; at t0+2s the override is over.
	for i := 1; i <= 3; i++ {
		now = t0.Add(time.Duration(i) * 600 * time.Millisecond)
		c2, err := authzResources(2*time.Second, 1).Compile(o)
		if err != nil {
			t.Fatal(err)
		}
		c2.Activate()
		cfg = c2
	}
	if dl, _ := cfg.Authz("inbound", 9080).OverrideDeadline("shop/block"); !dl.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("after swaps deadline = %v, want t0+2s", dl)
	}
	if d := cfg.Authz("inbound", 9080).Decide(authz.Request{Principal: botID, Path: "/"}, t0.Add(2*time.Second)); !d.Allowed() {
		t.Errorf("bot still blocked at t0+2s by %q", d.Policy)
	}
	// A candidate compiled but never activated starts no TTL: revision 2 first
	// activated at +10s runs to +12s, not from its refused compile at +5s.
	now = t0.Add(5 * time.Second)
	if _, err := authzResources(2*time.Second, 2).Compile(o); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(10 * time.Second)
	c3, err := authzResources(2*time.Second, 2).Compile(o)
	if err != nil {
		t.Fatal(err)
	}
	c3.Activate()
	if dl, _ := c3.Authz("inbound", 9080).OverrideDeadline("shop/block"); !dl.Equal(t0.Add(12 * time.Second)) {
		t.Errorf("revision 2 deadline = %v, want t0+12s", dl)
	}
}

// TestCompileAuthzRefuses: an engine refusal is a NACK naming listener and chain.
func TestCompileAuthzRefuses(t *testing.T) {
	st, err := authzResources(time.Second, 1).State()
	if err != nil {
		t.Fatal(err)
	}
	// Drop the TTL entry behind the decoder's back: compile must still refuse.
	l := *st[xdsresource.ListenerType]["inbound"].(*xdsresource.Listener)
	l.Overrides = nil
	st[xdsresource.ListenerType]["inbound"] = &l
	_, err = dataplane.Compile(st)
	if err == nil || !strings.Contains(err.Error(), `listener "inbound": filter_chains[0]: invalid authorization configuration: filter "weft.override": override policy "shop/block" has no TTL`) {
		t.Fatalf("err = %v", err)
	}
}

func TestInboundPort(t *testing.T) {
	r := dt.Resources{}
	names := []string{"inbound|1||", "inbound|65535||", "inbound|65536||", "inbound|0||", "inbound|80x||", "inbound|||", "outbound|80||a.b.svc.cluster.local", "inbound|123456||"}
	var vhs []*routev3.VirtualHost
	for i, n := range names {
		vhs = append(vhs, dt.VirtualHost(n, []string{fmt.Sprint("h", i)}, dt.PrefixRoute("/", n, 0)))
		r.Add(xdsresource.ClusterType, dt.EDSCluster(n, dt.ClusterOpts{}))
		r.Add(xdsresource.EndpointType, dt.Endpoints(n, dt.MustAddr("127.0.0.1:9")))
	}
	r.Add(xdsresource.RouteType, dt.RouteConfig("routes", vhs...))
	r.Add(xdsresource.ListenerType, dt.HTTPListener("inbound", dt.MustAddr("127.0.0.1:15006"), "routes"))
	cfg, err := r.Compile(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint16{"inbound|1||": 1, "inbound|65535||": 65535}
	for i, n := range names {
		rt := cfg.RouteTable("routes").Lookup(fmt.Sprint("h", i)).Match("/", nil)
		p, ok := rt.InboundPort()
		if w, wok := want[n]; p != w || ok != wok {
			t.Errorf("%s: InboundPort = %d %v, want %d %v", n, p, ok, w, wok)
		}
	}
}
