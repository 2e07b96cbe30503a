package admin

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/weft-mesh/weft/sidecar/authz"
)

func TestAuthzCollector(t *testing.T) {
	if _, err := NewAuthzCollector(nil, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil state: %v, want ErrConfig", err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := authz.NewState()
	anyP := []authz.Permission{{Kind: authz.PermissionAny}}
	bot := []authz.Principal{{Kind: authz.PrincipalAuthenticated, Name: authz.StringMatch{Value: "spiffe://cluster.local/ns/t42/sa/bot"}}}
	anyID := []authz.Principal{{Kind: authz.PrincipalAny}}
	e, err := authz.New(authz.Config{
		Filters: []authz.Filter{
			{Name: "weft.override", Override: true, Rules: &authz.Rules{Action: authz.Deny, Policies: []authz.Policy{
				{Name: "shop/block-bot", Permissions: anyP, Principals: bot}, {Name: "shop/old", Permissions: anyP, Principals: bot}}}},
			{Name: "allow", Rules: &authz.Rules{Action: authz.Allow, Policies: []authz.Policy{{Name: "shop/mesh", Permissions: anyP,
				Principals: []authz.Principal{{Kind: authz.PrincipalAuthenticated, AnyName: true}}}}},
				Shadow: &authz.Rules{Action: authz.Deny, Policies: []authz.Policy{{Name: "shop/would-deny", Permissions: anyP, Principals: anyID}}}},
		},
		Overrides: []authz.Override{{Name: "shop/block-bot", TTL: time.Hour}, {Name: "shop/old", TTL: time.Second}},
	}, st, t0)
	if err != nil {
		t.Fatal(err)
	}
	st.Commit(t0, e)
	for _, r := range []authz.Request{
		{Principal: "spiffe://cluster.local/ns/t42/sa/bot"},
		{Principal: "spiffe://cluster.local/ns/shop/sa/a"},
		{Principal: "spiffe://cluster.local/ns/shop/sa/b"},
		{},
	} {
		d := e.Decide(r, t0.Add(2*time.Second))
		d.Count()
	}
	exp := e.Expired()
	exp.Count()
	c, err := NewAuthzCollector(st, func() time.Time { return t0.Add(2 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	const m = "weft_sidecar_authz_decisions_total"
	want := map[string]float64{
		m + "{action=OVERRIDE}{decision=deny}{dry_run=false}{policy=shop/block-bot}": 1,
		m + "{action=ALLOW}{decision=allow}{dry_run=false}{policy=shop/mesh}":        2,
		m + "{action=ALLOW}{decision=deny}{dry_run=false}{policy=none}":              1,
		m + "{action=DENY}{decision=deny}{dry_run=true}{policy=shop/would-deny}":     3,
		m + "{action=EXPIRED}{decision=deny}{dry_run=false}{policy=none}":            1,
		"weft_sidecar_authz_overrides{state=active}":                                 1,
		"weft_sidecar_authz_overrides{state=expired}":                                1,
	}
	if diff := cmp.Diff(want, gather(t, c)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
