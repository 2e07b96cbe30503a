package gen

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/weft-mesh/weft/bootstrap/node"
	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/pilot/ir"
	"github.com/weft-mesh/weft/pilot/xds/snapshot"
	"google.golang.org/protobuf/proto"
)

func stalenessMesh(ps ...*ir.StalenessPolicy) *ir.Mesh {
	m := &ir.Mesh{Revision: 1, Staleness: ps}
	m.Index()
	return m
}

func sp(ns, name string, sel map[string]string, classes ...string) *ir.StalenessPolicy {
	p := &ir.StalenessPolicy{Namespace: ns, Name: name, Selector: sel}
	for _, c := range classes {
		p.Rules = append(p.Rules, ir.StalenessRule{Resource: c, WarnAfter: time.Minute, ExpireAfter: time.Hour, OnExpire: "failClosed"})
	}
	return p
}

// policyOf decodes n's staleness resource into class -> source.
func policyOf(t *testing.T, m *ir.Mesh, n *node.Node) map[string]string {
	t.Helper()
	s := mustProxy(t, m, n)
	r, ok := s.Resources[snapshot.StalenessType][stalenesspb.Name]
	if !ok || len(s.Resources[snapshot.StalenessType]) != 1 {
		t.Fatalf("%s: staleness resources %v, want exactly %q", n.ID, s.Names(snapshot.StalenessType), stalenesspb.Name)
	}
	var pb stalenesspb.Policy
	if err := proto.Unmarshal(r.Any.GetValue(), &pb); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range pb.GetRules() {
		got[r.GetResource()] = r.GetSource()
	}
	return got
}

// TestStalenessSelection: per class, a matching selector beats namespace-wide,
// then names order; other namespaces and non-matching selectors never apply.
func TestStalenessSelection(t *testing.T) {
	reviews := map[string]string{"app": "reviews"}
	tests := []struct {
		name     string
		policies []*ir.StalenessPolicy
		labels   map[string]string
		want     map[string]string
	}{
		{"none", nil, reviews, map[string]string{}},
		{"namespace-wide", []*ir.StalenessPolicy{sp("shop", "ns", nil, "routes")}, reviews, map[string]string{"routes": "shop/ns"}},
		{"unlabelled node gets namespace-wide only",
			[]*ir.StalenessPolicy{sp("shop", "ns", nil, "routes"), sp("shop", "mine", reviews, "routes", "clusters")}, nil,
			map[string]string{"routes": "shop/ns"}},
		{"selector beats namespace-wide, which fills the rest",
			[]*ir.StalenessPolicy{sp("shop", "a-ns", nil, "routes", "endpoints"), sp("shop", "z-mine", reviews, "routes")}, reviews,
			map[string]string{"routes": "shop/z-mine", "endpoints": "shop/a-ns"}},
		{"two selectors: first by name",
			[]*ir.StalenessPolicy{sp("shop", "b", reviews, "routes"), sp("shop", "a", map[string]string{"app": "reviews", "v": "1"}, "routes")},
			map[string]string{"app": "reviews", "v": "1"}, map[string]string{"routes": "shop/a"}},
		{"selector not matching",
			[]*ir.StalenessPolicy{sp("shop", "other", map[string]string{"app": "ratings"}, "routes")}, reviews, map[string]string{}},
		{"other namespace",
			[]*ir.StalenessPolicy{sp("prod", "ns", nil, "routes"), sp("prod", "mine", reviews, "routes")}, reviews, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node.Node{ID: "n", Namespace: "shop", Address: "10.0.0.1", Labels: tt.labels}
			if got := policyOf(t, stalenessMesh(tt.policies...), n); !cmp.Equal(got, tt.want) {
				t.Errorf("class -> source %v, want %v", got, tt.want)
			}
		})
	}
}

// TestStalenessSplitsClass: two sidecars that would share a snapshot (same
// namespace, port, backed services) get different ones when different policies
// select them, and share one when the same do.
func TestStalenessSplitsClass(t *testing.T) {
	m := stalenessMesh(sp("shop", "canary", map[string]string{"track": "canary"}, "routes"))
	a := &node.Node{ID: "a", Namespace: "shop", Address: "10.0.0.1", Labels: map[string]string{"track": "canary"}}
	b := &node.Node{ID: "b", Namespace: "shop", Address: "10.0.0.2", Labels: map[string]string{"track": "stable"}}
	c := &node.Node{ID: "c", Namespace: "shop", Address: "10.0.0.3", Labels: map[string]string{"track": "canary", "x": "y"}}
	sa, sb, sc := mustProxy(t, m, a), mustProxy(t, m, b), mustProxy(t, m, c)
	if sa.Version(snapshot.StalenessType) == sb.Version(snapshot.StalenessType) {
		t.Fatalf("canary and stable share staleness version %s", sa.Version(snapshot.StalenessType))
	}
	if sa != sc {
		t.Errorf("two sidecars selected by the same policy do not share their snapshot")
	}
}

// TestStalenessEncoding: durations, action, jitter and source as the sidecar
// reads them; unset durations stay unset; a fractional jitter is an error, not
// a truncation.
func TestStalenessEncoding(t *testing.T) {
	p := &ir.StalenessPolicy{Namespace: "shop", Name: "p", Rules: []ir.StalenessRule{
		{Resource: "routes", WarnAfter: 500 * time.Millisecond, RestrictAfter: time.Second, ExpireAfter: 2 * time.Second, OnExpire: "failClosed", Jitter: 10},
		{Resource: "endpoints", WarnAfter: time.Minute, OnExpire: "serveStale"},
	}}
	pb, err := stalenessPolicy(pickStaleness(stalenessMesh(p), &node.Node{Namespace: "shop"}))
	if err != nil {
		t.Fatal(err)
	}
	r := pb.GetRules()
	if len(r) != 2 || r[0].GetResource() != "endpoints" || r[1].GetResource() != "routes" {
		t.Fatalf("rules %v, want endpoints then routes", pb)
	}
	if r[0].GetExpireAfter() != nil || r[0].GetRestrictAfter() != nil || r[0].GetWarnAfter().AsDuration() != time.Minute || r[0].GetOnExpire() != "serveStale" {
		t.Errorf("endpoints = %v", r[0])
	}
	if r[1].GetWarnAfter().AsDuration() != 500*time.Millisecond || r[1].GetRestrictAfter().AsDuration() != time.Second ||
		r[1].GetExpireAfter().AsDuration() != 2*time.Second || r[1].GetJitterPercent() != 10 || r[1].GetSource() != "shop/p" {
		t.Errorf("routes = %v", r[1])
	}

	p.Rules[1].Jitter = 2.5
	_, err = Proxy(stalenessMesh(p), &node.Node{ID: "n", Namespace: "shop", Address: "10.0.0.1"})
	const want = "gen: node n: StalenessPolicy/shop/p: rule endpoints: jitter 2.5 is not a whole percent 0..100"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}
