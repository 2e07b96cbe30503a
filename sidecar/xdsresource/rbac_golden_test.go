package xdsresource_test

import (
	"sort"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3" // the listener filter gen emits
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/weft-mesh/weft/sidecar/authz"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// genGolden is pilot's gen golden output for authorization (the "gen" helper
// golden-tests it): what pilot sends, decoded here as a sidecar would.
const genGolden = "../../pilot/xds/gen/testdata/authz.golden.yaml"

// goldenListeners reads the inbound listeners of every sidecar proxy of the
// golden file.
func goldenListeners(t *testing.T) map[string]*listenerv3.Listener {
	t.Helper()
	out := map[string]*listenerv3.Listener{}
	for _, g := range dt.GenGoldens(t, genGolden) {
		proxy := g.Proxy
		raw, ok := g.Types["Listener"]["inbound"]
		if !ok {
			continue
		}
		l := &listenerv3.Listener{}
		if err := protojson.Unmarshal(raw, l); err != nil {
			t.Fatalf("%s: inbound listener: %v", proxy, err)
		}
		out[proxy] = l
	}
	if len(out) == 0 {
		t.Fatal("no inbound listener in gen's golden output")
	}
	return out
}

// TestDecodeGenGolden: every inbound listener pilot emits in its authorization
// golden decodes (no NACK), carries RBAC filters and compiles; the reviews
// sidecar's decisions follow the golden input's policies.
func TestDecodeGenGolden(t *testing.T) {
	ls := goldenListeners(t)
	names := make([]string, 0, len(ls))
	for n := range ls {
		names = append(names, n)
	}
	sort.Strings(names)
	now := time.Now()
	var reviews *xdsresource.Listener
	for _, proxy := range names {
		_, v, err := xdsresource.Decode(xdsresource.ListenerType, dt.Any(ls[proxy]))
		if err != nil {
			t.Errorf("%s: NACK: %v", proxy, err)
			continue
		}
		l := v.(*xdsresource.Listener)
		chains := append([]xdsresource.FilterChain(nil), l.FilterChains...)
		if l.Default != nil {
			chains = append(chains, *l.Default)
		}
		rbac := 0
		for i, fc := range chains {
			rbac += len(fc.RBAC)
			if _, err := authz.New(authz.Config{Filters: fc.RBAC, Overrides: l.Overrides, TCP: fc.TCP != nil}, nil, now); err != nil {
				t.Errorf("%s: chain %d (%s): %v", proxy, i, fc.Name, err)
			}
		}
		if rbac == 0 {
			t.Errorf("%s: no RBAC filter decoded", proxy)
		}
		if proxy == "reviews-1" {
			reviews = l
		}
	}
	if reviews == nil {
		t.Fatal("no reviews-1 proxy in the golden")
	}
	var http, tcp *xdsresource.FilterChain
	for i := range reviews.FilterChains {
		fc := &reviews.FilterChains[i]
		switch {
		case fc.DestinationPort == 8080 && fc.HTTP != nil && http == nil:
			http = fc
		case fc.DestinationPort == 7000 && fc.TCP != nil && tcp == nil:
			tcp = fc
		}
	}
	if http == nil || tcp == nil {
		t.Fatalf("reviews-1: no HTTP chain for 8080 (%v) or TCP chain for 7000 (%v)", http != nil, tcp != nil)
	}
	he, err := authz.New(authz.Config{Filters: http.RBAC, Overrides: reviews.Overrides}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	te, err := authz.New(authz.Config{Filters: tcp.RBAC, Overrides: reviews.Overrides, TCP: true}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	const (
		frontend = "spiffe://cluster.local/ns/shop/sa/frontend"
		ops      = "spiffe://cluster.local/ns/ops/sa/x"
		guest    = "spiffe://cluster.local/ns/guest/sa/x"
		t42bot   = "spiffe://cluster.local/ns/t42/sa/bot"
	)
	for _, c := range []struct {
		e       *authz.Engine
		req     authz.Request
		allowed bool
	}{
		{he, authz.Request{Principal: frontend, Method: "GET", Path: "/reviews/1", Port: 8080}, true},
		{he, authz.Request{Principal: ops, Method: "HEAD", Path: "/x.json", Port: 8080}, true},
		{he, authz.Request{Principal: ops, Method: "POST", Path: "/reviews/1", Port: 8080}, false},   // readers[0]: GET/HEAD only
		{he, authz.Request{Principal: frontend, Method: "GET", Path: "/admin/x", Port: 8080}, false}, // no-admin
		{he, authz.Request{Principal: guest, Method: "GET", Path: "/reviews/1", Port: 8080}, false},  // no ALLOW; trial-deny is a dry run
		{he, authz.Request{Method: "GET", Path: "/reviews/1", Port: 8080}, false},                    // plaintext
		{te, authz.Request{Principal: ops, Port: 7000}, true},                                        // readers[0] to ports 7000
		{te, authz.Request{Principal: guest, Port: 7000}, false},
	} {
		if d := c.e.Decide(c.req, now); d.Allowed() != c.allowed {
			t.Errorf("reviews-1 %+v: allowed=%v (outcome %d, policy %q), want %v", c.req, d.Allowed(), d.Outcome, d.Policy, c.allowed)
		}
	}
	// The Override (expiresAt 2026-12-01T14:00:02Z, ttl 2s) blocks the bot
	// on /reviews/ until then, judged on the time given.
	exp := reviews.Overrides[0].ExpiresAt
	he2, err := authz.New(authz.Config{Filters: http.RBAC, Overrides: reviews.Overrides}, nil, exp.Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bot := authz.Request{Principal: t42bot, Method: "GET", Path: "/reviews/1", Port: 8080}
	if d := he2.Decide(bot, exp.Add(-time.Millisecond)); d.Outcome != authz.DeniedPolicy || !d.Override || d.Policy != "shop/block-scraper" {
		t.Errorf("bot before expiresAt: %+v", d)
	}
	if d := he2.Decide(bot, exp); d.Override {
		t.Errorf("bot at expiresAt still blocked by the override: %+v", d)
	}
}
