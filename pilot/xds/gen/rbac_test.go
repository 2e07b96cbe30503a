package gen

import (
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/pilot/ir"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
)

func mustJSON(t *testing.T, s string, m *rbacv3.Permission) *rbacv3.Permission {
	t.Helper()
	if err := protojson.Unmarshal([]byte(s), m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return m
}

// TestPermissionFor: each operation list is an OR, the lists an AND; "*" is
// any; on TCP an ALLOW entry naming methods or paths never matches and a DENY
// entry drops them (it denies more).
func TestPermissionFor(t *testing.T) {
	get := `{"header": {"name": ":method", "stringMatch": {"exact": "GET"}}}`
	for _, tc := range []struct {
		name      string
		op        ir.AuthzOperation
		deny, tcp bool
		want      string // protojson; "" = never matches
	}{
		{"empty is any", ir.AuthzOperation{}, false, false, `{"any": true}`},
		{"method", ir.AuthzOperation{Methods: []string{"GET"}}, false, false, get},
		{"any method", ir.AuthzOperation{Methods: []string{"GET", "*"}}, false, false, `{"any": true}`},
		{"path patterns", ir.AuthzOperation{Paths: []string{"/a/*", "*.json", "/x"}}, false, false,
			`{"orRules": {"rules": [{"urlPath": {"path": {"prefix": "/a/"}}}, {"urlPath": {"path": {"suffix": ".json"}}}, {"urlPath": {"path": {"exact": "/x"}}}]}}`},
		{"any path", ir.AuthzOperation{Paths: []string{"*"}}, false, false, `{"any": true}`},
		{"method and port", ir.AuthzOperation{Methods: []string{"GET"}, Ports: []uint32{80, 81}}, false, false,
			`{"andRules": {"rules": [` + get + `, {"orRules": {"rules": [{"destinationPort": 80}, {"destinationPort": 81}]}}]}}`},
		{"TCP allow with a method never matches", ir.AuthzOperation{Methods: []string{"GET"}, Ports: []uint32{80}}, false, true, ""},
		{"TCP deny drops the method", ir.AuthzOperation{Methods: []string{"GET"}, Ports: []uint32{80}}, true, true, `{"destinationPort": 80}`},
		{"TCP deny of a path only denies all", ir.AuthzOperation{Paths: []string{"/x"}}, true, true, `{"any": true}`},
		{"TCP port", ir.AuthzOperation{Ports: []uint32{5432}}, false, true, `{"destinationPort": 5432}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := permissionFor(tc.op, tc.deny, tc.tcp)
			if tc.want == "" {
				if ok {
					t.Fatalf("matches %v, want never", got)
				}
				return
			}
			if !ok {
				t.Fatal("never matches")
			}
			if diff := cmp.Diff(mustJSON(t, tc.want, &rbacv3.Permission{}), got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrincipalFor: principals exact, "x*" prefix, "*x" suffix, "*" any
// authenticated peer; namespaces a SPIFFE prefix in the trust domain; both
// lists ANDed; an empty source is anyone (authenticated or not).
func TestPrincipalFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  ir.AuthzSource
		want string
	}{
		{"empty is anyone", ir.AuthzSource{}, `{"any": true}`},
		{"exact", ir.AuthzSource{Principals: []string{"spiffe://td/ns/a/sa/b"}}, `{"authenticated": {"principalName": {"exact": "spiffe://td/ns/a/sa/b"}}}`},
		{"patterns", ir.AuthzSource{Principals: []string{"spiffe://td/ns/a/*", "*/sa/bot", "*"}},
			`{"orIds": {"ids": [{"authenticated": {"principalName": {"prefix": "spiffe://td/ns/a/"}}}, {"authenticated": {"principalName": {"suffix": "/sa/bot"}}}, {"authenticated": {}}]}}`},
		{"namespace", ir.AuthzSource{Namespaces: []string{"shop"}}, `{"authenticated": {"principalName": {"prefix": "spiffe://td/ns/shop/"}}}`},
		{"any namespace is any authenticated peer", ir.AuthzSource{Namespaces: []string{"*"}}, `{"authenticated": {}}`},
		{"principal and namespace", ir.AuthzSource{Principals: []string{"spiffe://td/ns/a/sa/b"}, Namespaces: []string{"a"}},
			`{"andIds": {"ids": [{"authenticated": {"principalName": {"exact": "spiffe://td/ns/a/sa/b"}}}, {"authenticated": {"principalName": {"prefix": "spiffe://td/ns/a/"}}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := &rbacv3.Principal{}
			if err := protojson.Unmarshal([]byte(tc.want), want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, principalFor("td", tc.src), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuthzFilters: filter order and presence; dry runs in shadow_rules; an
// ALLOW policy without rules still makes the ALLOW filter (which then denies
// everything); ALLOW Overrides are never sent.
func TestAuthzFilters(t *testing.T) {
	names := func(pick authzPick) []string {
		var out []string
		for _, f := range httpRBACFilters("td", pick) {
			out = append(out, f.GetName())
		}
		return out
	}
	ap := func(name, action string, dry bool, rules ...ir.AuthzRule) *ir.AuthorizationPolicy {
		return &ir.AuthorizationPolicy{Namespace: "shop", Name: name, Action: action, DryRun: dry, Rules: rules}
	}
	anyRule := ir.AuthzRule{}
	for _, tc := range []struct {
		name string
		pick authzPick
		want []string
	}{
		{"nothing", authzPick{}, nil},
		{"every kind, in order", authzPick{
			policies:  []*ir.AuthorizationPolicy{ap("a", "AUDIT", false, anyRule), ap("b", "ALLOW", false, anyRule), ap("c", "DENY", false, anyRule)},
			overrides: []*ir.Override{{Namespace: "shop", Name: "o", Action: "DENY", Paths: []string{"/x"}}},
		}, []string{OverrideFilterName, AuthzDenyFilterName, AuthzAllowFilterName, AuthzAuditFilterName}},
		{"rule-less ALLOW denies all", authzPick{policies: []*ir.AuthorizationPolicy{ap("a", "ALLOW", false)}}, []string{AuthzAllowFilterName}},
		{"rule-less DENY is kept (matches nothing)", authzPick{policies: []*ir.AuthorizationPolicy{ap("a", "DENY", false)}}, []string{AuthzDenyFilterName}},
		{"rule-less dry run: nothing", authzPick{policies: []*ir.AuthorizationPolicy{ap("a", "ALLOW", true)}}, nil},
		{"dry run only", authzPick{policies: []*ir.AuthorizationPolicy{ap("a", "DENY", true, anyRule)}}, []string{AuthzDenyFilterName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(tc.pick)); diff != "" {
				t.Errorf("filters (-want +got):\n%s", diff)
			}
		})
	}
	// A dry run alone: shadow rules only, no enforcing rules.
	fs := httpRBACFilters("td", authzPick{policies: []*ir.AuthorizationPolicy{ap("a", "DENY", true, anyRule)}})
	m := &httprbacv3.RBAC{}
	if err := fs[0].GetTypedConfig().UnmarshalTo(m); err != nil {
		t.Fatal(err)
	}
	if m.GetRules() != nil || m.GetShadowRules().GetPolicies()["shop/a[0]"] == nil {
		t.Errorf("dry-run DENY filter: rules %v, shadow %v: want shadow_rules only, with shop/a[0]", m.GetRules(), m.GetShadowRules())
	}
	// pickAuthz never picks an ALLOW Override.
	mesh := &ir.Mesh{Overrides: []*ir.Override{{Namespace: "shop", Name: "allow", Action: "ALLOW", Paths: []string{"/x"}}, {Namespace: "shop", Name: "deny", Action: "DENY", Paths: []string{"/x"}}}}
	if got := pickAuthz(mesh, "shop", nil).overrides; len(got) != 1 || got[0].Name != "deny" {
		t.Errorf("picked overrides %v, want only the DENY one", got)
	}
}
