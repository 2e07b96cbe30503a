package authz

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	frontend = "spiffe://cluster.local/ns/shop/sa/frontend"
	bot      = "spiffe://cluster.local/ns/t42/sa/bot"
	shopNS   = "spiffe://cluster.local/ns/shop/"
)

// Builders in the shape pilot emits (issue9-design.md "Wire").
func principal(id string) Principal {
	return Principal{Kind: PrincipalAuthenticated, Name: StringMatch{Kind: Exact, Value: id}}
}
func namespace(ns string) Principal {
	return Principal{Kind: PrincipalAuthenticated, Name: StringMatch{Kind: Prefix, Value: "spiffe://cluster.local/ns/" + ns + "/"}}
}
func anyID() Principal                 { return Principal{Kind: PrincipalAny} }
func andIDs(ps ...Principal) Principal { return Principal{Kind: PrincipalAnd, IDs: ps} }
func orIDs(ps ...Principal) Principal  { return Principal{Kind: PrincipalOr, IDs: ps} }
func notID(p Principal) Principal      { return Principal{Kind: PrincipalNot, IDs: []Principal{p}} }
func path(k MatchKind, v string) Permission {
	return Permission{Kind: PermissionPath, Match: StringMatch{Kind: k, Value: v}}
}
func method(m string) Permission {
	return Permission{Kind: PermissionMethod, Match: StringMatch{Value: m}}
}
func port(p uint32) Permission             { return Permission{Kind: PermissionPort, Port: p} }
func anyPerm() Permission                  { return Permission{Kind: PermissionAny} }
func andRules(ps ...Permission) Permission { return Permission{Kind: PermissionAnd, Rules: ps} }
func orRules(ps ...Permission) Permission  { return Permission{Kind: PermissionOr, Rules: ps} }
func notRule(p Permission) Permission      { return Permission{Kind: PermissionNot, Rules: []Permission{p}} }

func pol(name string, perms []Permission, ids []Principal) Policy {
	return Policy{Name: name, Permissions: perms, Principals: ids}
}

// readers is the API.md example: frontend (in shop) may GET /reviews/* on 9080.
var readers = pol("shop/reviews-readers",
	[]Permission{andRules(orRules(method("GET")), orRules(path(Prefix, "/reviews/")), orRules(port(9080)))},
	[]Principal{andIDs(orIDs(principal(frontend)), orIDs(namespace("shop")))})

var denyAdmin = pol("shop/deny-admin", []Permission{orRules(path(Exact, "/admin"), path(Suffix, ".php"))}, []Principal{anyID()})
var auditAll = pol("shop/audit-all", []Permission{anyPerm()}, []Principal{anyID()})

func filters(fs ...Filter) Config { return Config{Filters: fs} }
func deny(ps ...Policy) Filter {
	return Filter{Name: "envoy.filters.http.rbac", Rules: &Rules{Action: Deny, Policies: ps}}
}
func allow(ps ...Policy) Filter {
	return Filter{Name: "envoy.filters.http.rbac", Rules: &Rules{Action: Allow, Policies: ps}}
}
func audit(ps ...Policy) Filter {
	return Filter{Name: "envoy.filters.http.rbac", Rules: &Rules{Action: Log, Policies: ps}}
}
func shadow(a Action, ps ...Policy) Filter {
	return Filter{Name: "envoy.filters.http.rbac", Shadow: &Rules{Action: a, Policies: ps}}
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func get(p string) Request            { return Request{Principal: frontend, Method: "GET", Path: p, Port: 9080} }
func as(id string, r Request) Request { r.Principal = id; return r }

// TestDecide is the policy × request → decision table.
func TestDecide(t *testing.T) {
	type want struct {
		outcome Outcome
		policy  string
	}
	allowed := want{outcome: Allowed}
	tests := []struct {
		name string
		cfg  Config
		req  Request
		want want
	}{
		{"no filters allow all", filters(), get("/x"), allowed},
		{"nil principal no filters", filters(), as("", get("/x")), allowed},
		{"allow matches", filters(allow(readers)), get("/reviews/1"), allowed},
		{"allow: wrong method", filters(allow(readers)), Request{Principal: frontend, Method: "POST", Path: "/reviews/1", Port: 9080}, want{DeniedNoMatch, ""}},
		{"allow: wrong path", filters(allow(readers)), get("/ratings/1"), want{DeniedNoMatch, ""}},
		{"allow: prefix is not the bare dir", filters(allow(readers)), get("/reviews"), want{DeniedNoMatch, ""}},
		{"allow: wrong port", filters(allow(readers)), Request{Principal: frontend, Method: "GET", Path: "/reviews/1", Port: 9081}, want{DeniedNoMatch, ""}},
		{"allow: other principal", filters(allow(readers)), as("spiffe://cluster.local/ns/shop/sa/other", get("/reviews/1")), want{DeniedNoMatch, ""}},
		{"allow: plaintext never matches a principal", filters(allow(readers)), as("", get("/reviews/1")), want{DeniedNoMatch, ""}},
		{"allow: principal right, namespace wrong (AND)", filters(allow(pol("a", []Permission{anyPerm()}, []Principal{andIDs(orIDs(principal(bot)), orIDs(namespace("shop")))}))), as(bot, get("/")), want{DeniedNoMatch, ""}},
		{"allow: query stripped", filters(allow(readers)), get("/reviews/1?x=/admin"), allowed},
		{"allow: fragment stripped", filters(allow(pol("p", []Permission{path(Exact, "/a")}, []Principal{anyID()}))), get("/a#frag"), allowed},
		{"allow any of several policies", filters(allow(readers, pol("shop/bots", []Permission{anyPerm()}, []Principal{namespace("t42")}))), as(bot, get("/anything")), allowed},
		{"allow set with no policies denies all", filters(allow()), get("/"), want{DeniedNoMatch, ""}},
		{"deny exact path", filters(deny(denyAdmin)), get("/admin"), want{DeniedPolicy, "shop/deny-admin"}},
		{"deny exact path: longer passes", filters(deny(denyAdmin)), get("/admin/x"), allowed},
		{"deny suffix", filters(deny(denyAdmin)), get("/x/index.php"), want{DeniedPolicy, "shop/deny-admin"}},
		{"deny suffix: query not part of path", filters(deny(denyAdmin)), get("/x?.php"), allowed},
		{"deny no match allows", filters(deny(denyAdmin)), get("/reviews/1"), allowed},
		{"deny first, then allow", filters(deny(denyAdmin), allow(pol("all", []Permission{anyPerm()}, []Principal{anyID()}))), get("/admin"), want{DeniedPolicy, "shop/deny-admin"}},
		{"deny miss, allow hit", filters(deny(denyAdmin), allow(readers)), get("/reviews/2"), allowed},
		{"deny miss, allow miss", filters(deny(denyAdmin), allow(readers)), get("/other"), want{DeniedNoMatch, ""}},
		{"audit never denies", filters(audit(auditAll)), as("", get("/admin")), allowed},
		{"audit after deny: deny decides", filters(deny(denyAdmin), audit(auditAll)), get("/admin"), want{DeniedPolicy, "shop/deny-admin"}},
		{"dry-run deny does not deny", filters(shadow(Deny, denyAdmin)), get("/admin"), allowed},
		{"dry-run allow does not deny", filters(shadow(Allow, readers)), get("/other"), allowed},
		{"enforced and shadow in one filter", filters(Filter{Name: "f", Rules: &Rules{Action: Deny, Policies: []Policy{denyAdmin}}, Shadow: &Rules{Action: Deny, Policies: []Policy{auditAll}}}), get("/x"), allowed},
		{"not_id: everyone but frontend", filters(deny(pol("not-frontend", []Permission{anyPerm()}, []Principal{notID(principal(frontend))}))), as(bot, get("/")), want{DeniedPolicy, "not-frontend"}},
		{"not_id: frontend passes", filters(deny(pol("not-frontend", []Permission{anyPerm()}, []Principal{notID(principal(frontend))}))), get("/"), allowed},
		{"not_id: plaintext is not frontend", filters(deny(pol("not-frontend", []Permission{anyPerm()}, []Principal{notID(principal(frontend))}))), as("", get("/")), want{DeniedPolicy, "not-frontend"}},
		{"not_rule on path", filters(allow(pol("only-api", []Permission{notRule(path(Prefix, "/internal/"))}, []Principal{anyID()}))), get("/internal/x"), want{DeniedNoMatch, ""}},
		{"any authenticated", filters(allow(pol("mesh", []Permission{anyPerm()}, []Principal{{Kind: PrincipalAuthenticated, AnyName: true}}))), as(bot, get("/")), allowed},
		{"any authenticated: not plaintext", filters(allow(pol("mesh", []Permission{anyPerm()}, []Principal{{Kind: PrincipalAuthenticated, AnyName: true}}))), as("", get("/")), want{DeniedNoMatch, ""}},
		{"empty permissions match nothing", filters(deny(pol("empty", nil, []Principal{anyID()}))), get("/"), allowed},
		{"empty principals match nothing", filters(deny(pol("empty", []Permission{anyPerm()}, nil))), get("/"), allowed},
		{"namespace prefix is not a name prefix", filters(allow(pol("shop", []Permission{anyPerm()}, []Principal{namespace("shop")}))), as("spiffe://cluster.local/ns/shopping/sa/x", get("/")), want{DeniedNoMatch, ""}},
		{"first matching policy by name is reported", filters(deny(pol("b", []Permission{anyPerm()}, []Principal{anyID()}), pol("a", []Permission{anyPerm()}, []Principal{anyID()}))), get("/"), want{DeniedPolicy, "a"}},
		{"method is case-sensitive", filters(allow(pol("get", []Permission{method("GET")}, []Principal{anyID()}))), Request{Method: "get", Path: "/"}, want{DeniedNoMatch, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			d := e.Decide(tt.req, t0)
			if d.Outcome != tt.want.outcome || d.Policy != tt.want.policy {
				t.Errorf("Decide(%+v) = outcome %d policy %q, want %d %q", tt.req, d.Outcome, d.Policy, tt.want.outcome, tt.want.policy)
			}
			if d.Allowed() != (tt.want.outcome == Allowed) {
				t.Errorf("Allowed() = %v", d.Allowed())
			}
			if !d.Allowed() && d.Filter == "" {
				t.Error("a denial names no filter")
			}
		})
	}
}

// TestTCP: on a network RBAC chain path and method permissions never match,
// ports and principals do.
func TestTCP(t *testing.T) {
	cfg := Config{TCP: true, Filters: []Filter{
		deny(pol("shop/deny-bot", []Permission{anyPerm()}, []Principal{principal(bot)})),
		allow(pol("shop/readers", []Permission{andRules(port(9080), path(Prefix, "/"))}, []Principal{anyID()}),
			pol("shop/db", []Permission{port(5432)}, []Principal{namespace("shop")})),
	}}
	e, err := New(cfg, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		req  Request
		want Outcome
	}{
		{Request{Principal: frontend, Port: 5432}, Allowed},
		{Request{Principal: frontend, Port: 9080}, DeniedNoMatch}, // the path half never holds on TCP
		{Request{Principal: bot, Port: 5432}, DeniedPolicy},
		{Request{Principal: "", Port: 5432}, DeniedNoMatch},
		{Request{Principal: frontend, Port: 5432, Path: "/x", Method: "GET"}, Allowed}, // ignored on TCP
	} {
		if d := e.Decide(tt.req, t0); d.Outcome != tt.want {
			t.Errorf("TCP Decide(%+v) = %d (%s), want %d", tt.req, d.Outcome, d.Policy, tt.want)
		}
	}
}

func overrideFilter(ps ...Policy) Filter {
	return Filter{Name: "weft.override", Override: true, Rules: &Rules{Action: Deny, Policies: ps}}
}

var blockBot = pol("shop/block-scraper", []Permission{orRules(path(Prefix, "/reviews/"))}, []Principal{orIDs(principal(bot))})

// TestOverrides: an Override is enforced first, from its first sighting until
// min(expiresAt, firstSeen+ttl), on the clock Decide is given.
func TestOverrides(t *testing.T) {
	allowAll := allow(pol("shop/all", []Permission{anyPerm()}, []Principal{anyID()}))
	req := as(bot, get("/reviews/1"))
	tests := []struct {
		name     string
		o        Override
		at       time.Duration // after t0
		want     Outcome
		deadline time.Duration
	}{
		{"at first sight", Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7}, 0, DeniedPolicy, 2 * time.Second},
		{"just before ttl", Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7}, 2*time.Second - 1, DeniedPolicy, 2 * time.Second},
		{"at ttl", Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7}, 2 * time.Second, Allowed, 2 * time.Second},
		{"expiresAt first", Override{Name: "shop/block-scraper", TTL: 10 * time.Minute, Revision: 7, ExpiresAt: t0.Add(time.Second)}, time.Second, Allowed, time.Second},
		{"expiresAt later than ttl", Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7, ExpiresAt: t0.Add(time.Hour)}, 3 * time.Second, Allowed, 2 * time.Second},
		{"expiresAt already past", Override{Name: "shop/block-scraper", TTL: time.Hour, Revision: 7, ExpiresAt: t0.Add(-time.Second)}, 0, Allowed, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(Config{Filters: []Filter{overrideFilter(blockBot), allowAll}, Overrides: []Override{tt.o}}, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			d := e.Decide(req, t0.Add(tt.at))
			if d.Outcome != tt.want {
				t.Errorf("at +%v: outcome %d (%s), want %d", tt.at, d.Outcome, d.Policy, tt.want)
			}
			if d.Outcome == DeniedPolicy && (!d.Override || d.Policy != "shop/block-scraper" || d.Filter != "weft.override") {
				t.Errorf("denial = %+v, want the override named", d)
			}
			if got, ok := e.OverrideDeadline("shop/block-scraper"); !ok || !got.Equal(t0.Add(tt.deadline)) {
				t.Errorf("deadline = %v %v, want %v", got, ok, t0.Add(tt.deadline))
			}
			// Others are untouched by the override.
			if d := e.Decide(get("/reviews/1"), t0.Add(tt.at)); !d.Allowed() {
				t.Errorf("frontend denied by %q", d.Policy)
			}
		})
	}
}

// TestOverrideSurvivesSwaps: recompiling (a config swap, any number of times)
// keeps the first sighting; a new revision starts a new TTL; a refused
// candidate (compiled, never committed) starts none.
func TestOverrideSurvivesSwaps(t *testing.T) {
	st := NewState()
	o := Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7}
	compile := func(o Override, at time.Time) *Engine {
		t.Helper()
		e, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st, at)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	req := as(bot, get("/reviews/1"))
	// A refused candidate at t0-1h: not committed, so no sighting.
	_ = compile(o, t0.Add(-time.Hour))
	e := compile(o, t0)
	st.Commit(t0, e)
	for i := 1; i <= 3; i++ { // swaps at +0.5s, +1s, +1.5s
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		e = compile(o, at)
		st.Commit(at, e)
		if dl, _ := e.OverrideDeadline(o.Name); !dl.Equal(t0.Add(2 * time.Second)) {
			t.Fatalf("swap %d: deadline %v, want t0+2s", i, dl)
		}
	}
	if d := e.Decide(req, t0.Add(2*time.Second)); !d.Allowed() {
		t.Fatalf("still blocked at t0+2s after swaps")
	}
	if a, x := st.OverrideCounts(t0.Add(time.Second)); a != 1 || x != 0 {
		t.Errorf("counts at +1s = %d active %d expired", a, x)
	}
	if a, x := st.OverrideCounts(t0.Add(3 * time.Second)); a != 0 || x != 1 {
		t.Errorf("counts at +3s = %d active %d expired", a, x)
	}
	// Still in the config after expiry: a later swap does not restart it.
	e = compile(o, t0.Add(10*time.Second))
	st.Commit(t0.Add(10*time.Second), e)
	if d := e.Decide(req, t0.Add(10*time.Second)); !d.Allowed() {
		t.Fatal("an expired override came back on a swap")
	}
	// A new revision (the Override was edited) starts its own TTL.
	o2 := o
	o2.Revision = 8
	e = compile(o2, t0.Add(20*time.Second))
	st.Commit(t0.Add(20*time.Second), e)
	if d := e.Decide(req, t0.Add(21*time.Second)); d.Allowed() {
		t.Fatal("revision 8 not enforced")
	}
	// Absent (a config without it) but not expired: remembered, so coming back
	// at +21.5s does not restart it.
	st.Commit(t0.Add(21 * time.Second))
	e = compile(o2, t0.Add(21500*time.Millisecond))
	st.Commit(t0.Add(21500*time.Millisecond), e)
	if dl, _ := e.OverrideDeadline(o.Name); !dl.Equal(t0.Add(22 * time.Second)) {
		t.Errorf("returning override: deadline %v, want t0+22s", dl)
	}
	// Revision 7 is gone from the config and past its deadline: forgotten.
	for _, g := range st.Sightings() {
		if g.Revision == 7 {
			t.Errorf("expired absent sighting kept: %+v", g)
		}
	}
}

// TestRestore: a restart that restores the sightings does not extend an
// Override; a sighting from the future is clamped to now.
func TestRestore(t *testing.T) {
	st := NewState()
	o := Override{Name: "shop/block-scraper", TTL: 2 * time.Second, Revision: 7}
	e, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st, t0)
	if err != nil {
		t.Fatal(err)
	}
	st.Commit(t0, e)
	saved := st.Sightings()
	st2 := NewState()
	if err := st2.Restore(saved, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	e2, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st2, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if dl, _ := e2.OverrideDeadline(o.Name); !dl.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("after restore deadline %v, want t0+2s", dl)
	}
	future := []Sighting{{Name: o.Name, Revision: 7, FirstSeen: t0.Add(time.Hour)}}
	st3 := NewState()
	if err := st3.Restore(future, t0); err != nil {
		t.Fatal(err)
	}
	e3, _ := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st3, t0.Add(time.Second))
	if dl, _ := e3.OverrideDeadline(o.Name); !dl.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("future sighting: deadline %v, want t0+2s", dl)
	}
	// Bounds: MaxRemembered restores, one more is refused.
	many := make([]Sighting, MaxRemembered+1)
	for i := range many {
		many[i] = Sighting{Name: fmt.Sprintf("ns/o%d", i), FirstSeen: t0}
	}
	if err := NewState().Restore(many[:MaxRemembered], t0); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	if err := NewState().Restore(many, t0); err == nil {
		t.Error("one past MaxRemembered accepted")
	}
	if err := NewState().Restore([]Sighting{{Name: ""}}, t0); err == nil {
		t.Error("nameless sighting accepted")
	}
}

// TestRememberedBound: absent, unexpired sightings are forgotten oldest first
// past MaxRemembered.
func TestRememberedBound(t *testing.T) {
	st := NewState()
	gs := make([]Sighting, MaxRemembered)
	for i := range gs {
		gs[i] = Sighting{Name: fmt.Sprintf("ns/o%d", i), FirstSeen: t0.Add(time.Duration(i) * time.Millisecond), Deadline: t0.Add(time.Hour)}
	}
	if err := st.Restore(gs, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{{Name: blockBot.Name, TTL: time.Minute, Revision: 1}}}, st, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	st.Commit(t0.Add(time.Minute), e)
	got := st.Sightings()
	if len(got) != MaxRemembered {
		t.Fatalf("%d sightings, want %d", len(got), MaxRemembered)
	}
	for _, g := range got {
		if g.Name == "ns/o0" {
			t.Error("the oldest absent sighting was kept")
		}
	}
}

// TestNewRefuses: every refusal, with the bound and one past it.
func TestNewRefuses(t *testing.T) {
	okOverride := Override{Name: blockBot.Name, TTL: time.Second, Revision: 1}
	policies := func(n int) []Policy {
		ps := make([]Policy, n)
		for i := range ps {
			ps[i] = pol(fmt.Sprintf("ns/p%d", i), []Permission{anyPerm()}, []Principal{anyID()})
		}
		return ps
	}
	nestPerm := func(d int) Permission {
		p := anyPerm()
		for range d - 1 {
			p = notRule(p)
		}
		return p
	}
	nestID := func(d int) Principal {
		p := anyID()
		for range d - 1 {
			p = notID(p)
		}
		return p
	}
	fs := func(n int) []Filter {
		out := make([]Filter, n)
		for i := range out {
			out[i] = deny(denyAdmin)
		}
		return out
	}
	ovs := func(n int) Config {
		c := Config{Filters: []Filter{{Name: "weft.override", Override: true, Rules: &Rules{Action: Deny}}}}
		for i := range n {
			name := fmt.Sprintf("ns/o%d", i)
			c.Overrides = append(c.Overrides, Override{Name: name, TTL: time.Second})
			c.Filters[0].Rules.Policies = append(c.Filters[0].Rules.Policies, pol(name, []Permission{anyPerm()}, []Principal{anyID()}))
		}
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		err  string // "" accepted
	}{
		{"filters at bound", Config{Filters: fs(MaxFilters)}, ""},
		{"filters past bound", Config{Filters: fs(MaxFilters + 1)}, "9 RBAC filters, limit 8"},
		{"policies at bound", filters(deny(policies(MaxPolicies)...)), ""},
		{"policies past bound", filters(deny(policies(MaxPolicies + 1)...)), "1025 policies, limit 1024"},
		{"depth at bound", filters(deny(pol("d", []Permission{nestPerm(MaxDepth)}, []Principal{nestID(MaxDepth)}))), ""},
		{"permission depth past bound", filters(deny(pol("d", []Permission{nestPerm(MaxDepth + 1)}, []Principal{anyID()}))), "nested deeper than 8"},
		{"principal depth past bound", filters(deny(pol("d", []Permission{anyPerm()}, []Principal{nestID(MaxDepth + 1)}))), "nested deeper than 8"},
		{"match at bound", filters(deny(pol("m", []Permission{path(Exact, strings.Repeat("a", MaxMatchBytes))}, []Principal{anyID()}))), ""},
		{"match past bound", filters(deny(pol("m", []Permission{path(Exact, strings.Repeat("a", MaxMatchBytes+1))}, []Principal{anyID()}))), "1025 bytes, limit 1024"},
		{"policy name at bound", filters(deny(pol(strings.Repeat("n", MaxNameBytes), []Permission{anyPerm()}, []Principal{anyID()}))), ""},
		{"policy name past bound", filters(deny(pol(strings.Repeat("n", MaxNameBytes+1), []Permission{anyPerm()}, []Principal{anyID()}))), "want 1..512 bytes"},
		{"empty policy name", filters(deny(pol("", nil, nil))), "want 1..512 bytes"},
		{"duplicate policy", filters(deny(denyAdmin, denyAdmin)), `policy "shop/deny-admin" twice`},
		{"port 0", filters(deny(pol("p", []Permission{port(0)}, []Principal{anyID()}))), "destination port 0"},
		{"port past 65535", filters(deny(pol("p", []Permission{port(65536)}, []Principal{anyID()}))), "destination port 65536"},
		{"empty and", filters(deny(pol("p", []Permission{andRules()}, []Principal{anyID()}))), "permission set of 0 rules"},
		{"not of two", filters(deny(pol("p", []Permission{anyPerm()}, []Principal{{Kind: PrincipalNot, IDs: []Principal{anyID(), anyID()}}}))), "principal set of 2 ids"},
		{"override without ttl", Config{Filters: []Filter{overrideFilter(blockBot)}}, `override policy "shop/block-scraper" has no TTL`},
		{"ttl of another chain's override", Config{Filters: []Filter{deny(denyAdmin)}, Overrides: []Override{okOverride}}, ""},
		{"override ttl at bound", Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{{Name: blockBot.Name, TTL: MaxOverrideTTL}}}, ""},
		{"override ttl past bound", Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{{Name: blockBot.Name, TTL: MaxOverrideTTL + 1}}}, "outside (0, 1h0m0s]"},
		{"override ttl 0", Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{{Name: blockBot.Name}}}, "ttl 0s outside"},
		{"override listed twice", Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{okOverride, okOverride}}, "listed twice"},
		{"override filter that allows", Config{Filters: []Filter{{Name: "weft.override", Override: true, Rules: &Rules{Action: Allow, Policies: []Policy{blockBot}}}}, Overrides: []Override{okOverride}}, "override filter must DENY"},
		{"overrides at bound", ovs(MaxOverrides), ""},
		{"overrides past bound", ovs(MaxOverrides + 1), "257 overrides, limit 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil, t0)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.err != "" && err == nil:
				t.Fatalf("accepted, want %q", tt.err)
			case tt.err != "" && (!strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid)):
				t.Fatalf("error %q, want it to contain %q and wrap ErrInvalid", err, tt.err)
			}
		})
	}
}

// TestCounts: every counted result, dry run apart, and the policy-name cap.
func TestCounts(t *testing.T) {
	st := NewState()
	cfg := Config{Filters: []Filter{
		overrideFilter(blockBot),
		{Name: "deny", Rules: &Rules{Action: Deny, Policies: []Policy{denyAdmin}}, Shadow: &Rules{Action: Deny, Policies: []Policy{pol("shop/dry-deny", []Permission{anyPerm()}, []Principal{anyID()})}}},
		allow(readers),
		audit(auditAll),
	}, Overrides: []Override{{Name: blockBot.Name, TTL: time.Minute}}}
	e, err := New(cfg, st, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Request{get("/reviews/1"), get("/admin"), get("/nope"), as(bot, get("/reviews/1"))} {
		d := e.Decide(r, t0)
		d.Count()
		if want := d.Allowed(); (d.Audit == "shop/audit-all") != want {
			t.Errorf("%+v: Audit = %q, allowed %v", r, d.Audit, want)
		}
	}
	got := map[string]uint64{}
	for _, c := range st.Counts() {
		got[fmt.Sprintf("%s/%s/deny=%v/dry=%v", c.Policy, c.Action, c.Deny, c.DryRun)] = c.N
	}
	want := map[string]uint64{
		"shop/dry-deny/DENY/deny=true/dry=true":           3, // every request that reached the deny filter
		"shop/reviews-readers/ALLOW/deny=false/dry=false": 1,
		"shop/audit-all/AUDIT/deny=false/dry=false":       1,
		"shop/deny-admin/DENY/deny=true/dry=false":        1,
		"none/ALLOW/deny=true/dry=false":                  1,
		"shop/block-scraper/OVERRIDE/deny=true/dry=false": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts\n got %v\nwant %v", got, want)
	}
	// Cap: MaxPolicyNames distinct names, then "other".
	st2 := NewState()
	ps := make([]Policy, MaxPolicyNames+1)
	for i := range ps {
		ps[i] = pol(fmt.Sprintf("ns/p%03d", i), []Permission{anyPerm()}, []Principal{principal(fmt.Sprintf("id%d", i))})
	}
	e2, err := New(filters(audit(ps...)), st2, t0)
	if err != nil {
		t.Fatal(err)
	}
	last := e2.Decide(Request{Principal: fmt.Sprintf("id%d", MaxPolicyNames)}, t0)
	last.Count()
	at := e2.Decide(Request{Principal: fmt.Sprintf("id%d", MaxPolicyNames-1)}, t0)
	at.Count()
	cs := st2.Counts()
	if len(cs) != 2 || cs[0].Policy != fmt.Sprintf("ns/p%03d", MaxPolicyNames-1) || cs[1].Policy != OtherPolicy {
		t.Errorf("capped counts = %+v, want ns/p255 and other", cs)
	}
}

func TestNilEngine(t *testing.T) {
	var e *Engine
	if d := e.Decide(get("/"), t0); !d.Allowed() {
		t.Error("nil engine denies")
	}
	if !e.Empty() || e.Overrides() != nil {
		t.Error("nil engine not empty")
	}
}

// benchEngine is a chain as pilot emits it for a workload with an Override, a
// DENY, three ALLOW policies and an AUDIT.
func benchEngine(b *testing.B) *Engine {
	ps := []Policy{readers,
		pol("shop/writers", []Permission{andRules(orRules(method("POST"), method("PUT")), orRules(path(Prefix, "/reviews/")))}, []Principal{orIDs(principal("spiffe://cluster.local/ns/shop/sa/admin"))}),
		pol("shop/health", []Permission{orRules(path(Exact, "/healthz"))}, []Principal{anyID()})}
	e, err := New(Config{Filters: []Filter{overrideFilter(blockBot), deny(denyAdmin), allow(ps...), audit(auditAll)},
		Overrides: []Override{{Name: blockBot.Name, TTL: time.Hour}}}, nil, t0)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkDecide(b *testing.B) {
	e := benchEngine(b)
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"allow", get("/reviews/1?x=1")},
		{"deny-no-match", as("spiffe://cluster.local/ns/other/sa/x", get("/reviews/1"))},
		{"override", as(bot, get("/reviews/1"))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := e.Decide(bc.req, t0)
				d.Count()
			}
		})
	}
}

func TestDecideAllocs(t *testing.T) {
	e := benchEngine(&testing.B{})
	req := get("/reviews/1?x=1")
	if n := testing.AllocsPerRun(100, func() { d := e.Decide(req, t0); d.Count() }); n != 0 {
		t.Errorf("Decide+Count allocates %v per call", n)
	}
}

// TestChanged: a Commit that adds a sighting closes Changed; one that changes
// nothing does not.
func TestChanged(t *testing.T) {
	st := NewState()
	o := Override{Name: blockBot.Name, TTL: time.Minute, Revision: 1}
	e, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st, t0)
	if err != nil {
		t.Fatal(err)
	}
	ch := st.Changed()
	st.Commit(t0, e)
	select {
	case <-ch:
	default:
		t.Fatal("a new sighting did not close Changed")
	}
	ch = st.Changed()
	st.Commit(t0.Add(time.Second), e)
	select {
	case <-ch:
		t.Fatal("an unchanged commit closed Changed")
	default:
	}
	// After a restart: a restored sighting going live is a change.
	st2 := NewState()
	if err := st2.Restore(st.Sightings(), t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	e2, err := New(Config{Filters: []Filter{overrideFilter(blockBot)}, Overrides: []Override{o}}, st2, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ch = st2.Changed()
	st2.Commit(t0.Add(2*time.Second), e2)
	select {
	case <-ch:
	default:
		t.Fatal("a restored sighting going live did not close Changed")
	}
}

func TestSampler(t *testing.T) {
	var s Sampler
	if ok, n := s.Take(t0); !ok || n != 0 {
		t.Fatalf("first Take = %v %d", ok, n)
	}
	for i := range 3 {
		if ok, _ := s.Take(t0.Add(time.Duration(i) * 300 * time.Millisecond)); ok {
			t.Fatalf("Take %d within the interval let a line through", i)
		}
	}
	if ok, n := s.Take(t0.Add(LogInterval)); !ok || n != 3 {
		t.Fatalf("Take after the interval = %v %d, want true 3", ok, n)
	}
}
