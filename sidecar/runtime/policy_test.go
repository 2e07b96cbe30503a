package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	dt "github.com/weft-mesh/weft/sidecar/dataplane/dataplanetest"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// withPolicy is mesh plus a delivered StalenessPolicy (nil rules: an empty one).
func withPolicy(rules ...*stalenesspb.Rule) dt.Resources {
	res := mesh("127.0.0.1:9001")
	res[xdsresource.StalenessType] = []proto.Message{&stalenesspb.Policy{Rules: rules}}
	return res
}

// shortRoutes is a delivered routes rule expiring after 2s, no jitter.
var shortRoutes = &stalenesspb.Rule{Resource: "routes", WarnAfter: durationpb.New(time.Second), ExpireAfter: durationpb.New(2 * time.Second),
	OnExpire: "failClosed", Source: "shop/fast"}

// TestPolicyPrecedence: per class, the operator's override beats the delivered
// policy, which beats the default; /config_dump says which one judges each
// class, and the request path's verdict follows the one in force.
func TestPolicyPrecedence(t *testing.T) {
	endpoints := &stalenesspb.Rule{Resource: "endpoints", WarnAfter: durationpb.New(10 * time.Second), OnExpire: "serveStale", Source: "shop/wide"}
	def := PolicyInfo{Source: PolicyDefault, WarnAfter: "5m0s", ExpireAfter: "24h0m0s", OnExpire: "failClosed", Jitter: 10}
	tests := []struct {
		name      string
		res       dt.Resources
		overrides []string
		want      map[string]PolicyInfo // routes, endpoints, clusters
		degraded  string                // at t0+3s
	}{
		{"defaults without a delivered policy", mesh("127.0.0.1:9001"), nil, map[string]PolicyInfo{
			"routes": def, "clusters": def, "endpoints": {Source: PolicyDefault, WarnAfter: "1m0s", OnExpire: "serveStale"}}, ""},
		{"empty delivered policy: defaults", withPolicy(), nil, map[string]PolicyInfo{
			"routes": def, "clusters": def, "endpoints": {Source: PolicyDefault, WarnAfter: "1m0s", OnExpire: "serveStale"}}, ""},
		{"delivered beats default", withPolicy(endpoints, shortRoutes), nil, map[string]PolicyInfo{
			"routes":    {Source: PolicyPilot, From: "shop/fast", WarnAfter: "1s", ExpireAfter: "2s", OnExpire: "failClosed"},
			"endpoints": {Source: PolicyPilot, From: "shop/wide", WarnAfter: "10s", OnExpire: "serveStale"},
			"clusters":  def}, "routes expired (age 3s > expireAfter 2s)"},
		{"override beats delivered", withPolicy(endpoints, shortRoutes), []string{"routes=1h/48h"}, map[string]PolicyInfo{
			"routes":    {Source: PolicyOverride, WarnAfter: "1h0m0s", ExpireAfter: "48h0m0s", OnExpire: "failClosed"},
			"endpoints": {Source: PolicyPilot, From: "shop/wide", WarnAfter: "10s", OnExpire: "serveStale"},
			"clusters":  def}, ""},
		{"override beats default", mesh("127.0.0.1:9001"), []string{"clusters=1s/2s/failClosed"}, map[string]PolicyInfo{
			"routes": def, "endpoints": {Source: PolicyDefault, WarnAfter: "1m0s", OnExpire: "serveStale"},
			"clusters": {Source: PolicyOverride, WarnAfter: "1s", ExpireAfter: "2s", OnExpire: "failClosed"}}, "clusters expired (age 3s > expireAfter 2s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.runtime(func(c *Config) { c.Overrides = overrides(t, tc.overrides...) })
			if err := r.Apply(context.Background(), e.update(r, tc.res, "v1", e.sign(tc.res, signOpts{}))); err != nil {
				t.Fatal(err)
			}
			r.Tick(t0.Add(3*time.Second), time.Time{})
			got := map[string]PolicyInfo{}
			for _, s := range r.Dump().Staleness {
				if _, ok := tc.want[s.Class]; ok {
					got[s.Class] = s.Policy
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
			if reason, _ := r.Degraded(); reason != tc.degraded {
				t.Errorf("Degraded = %q, want %q", reason, tc.degraded)
			}
		})
	}
}

// TestDeliveredPolicyChange: a push that changes only the policy activates (the
// policy is part of the configuration) and takes effect at once.
func TestDeliveredPolicyChange(t *testing.T) {
	e := newEnv(t)
	r := e.runtime()
	ctx := context.Background()
	res := withPolicy()
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0.Add(3*time.Second), time.Time{})
	if _, bad := r.Degraded(); bad {
		t.Fatal("degraded under the defaults")
	}
	e.clock.Set(t0.Add(3 * time.Second)) // activation confirms: age starts again
	res = withPolicy(shortRoutes)
	if err := r.Apply(ctx, e.update(r, res, "v2", e.sign(res, signOpts{revision: 2}))); err != nil {
		t.Fatal(err)
	}
	if got := r.Dump().Counters.Activations; got != 2 {
		t.Fatalf("activations %d, want 2", got)
	}
	r.Tick(t0.Add(6*time.Second), time.Time{})
	if reason, _ := r.Degraded(); reason != "routes expired (age 3s > expireAfter 2s)" {
		t.Fatalf("Degraded = %q after the new policy", reason)
	}
}

// TestLastKnownGoodKeepsDeliveredPolicy: a restart without pilot judges the
// persisted snapshot by the policy persisted with it (an operator override still
// wins), so a short delivered expireAfter holds offline too.
func TestLastKnownGoodKeepsDeliveredPolicy(t *testing.T) {
	tests := []struct {
		name      string
		overrides []string
		wantErr   error
		source    string // routes policy source once active
	}{
		{"delivered policy refuses it", nil, errStale, ""},
		{"override still wins", []string{"routes=1h/48h"}, nil, PolicyOverride},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.runtime()
			res := withPolicy(shortRoutes)
			if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
				t.Fatal(err)
			}
			e.clock.Set(t0.Add(3 * time.Second))
			r2 := e.runtime(func(c *Config) { c.Overrides = overrides(t, tc.overrides...) })
			if _, err := r2.LoadLastKnownGood(); !errors.Is(err, tc.wantErr) {
				t.Fatalf("LoadLastKnownGood = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if !r2.ActivateLastKnownGood() {
				t.Fatal("not activated")
			}
			for _, s := range r2.Dump().Staleness {
				if s.Class == "routes" && s.Policy.Source != tc.source {
					t.Errorf("routes policy %+v, want source %s", s.Policy, tc.source)
				}
				if s.Class == "routes" && s.Level != "FRESH" && tc.source == PolicyOverride {
					t.Errorf("routes %s under the override", s.Level)
				}
			}
		})
	}
}

// TestOverridesChecked: New refuses an override set it could not trust.
func TestOverridesChecked(t *testing.T) {
	tests := []struct {
		name string
		set  staleness.Set
		want string
	}{
		{"wrong class", staleness.Set{staleness.Routes: staleness.Default(staleness.Clusters)}, `runtime: invalid config: Overrides[routes]: policy is for class "clusters"`},
		{"out of bounds", staleness.Set{staleness.Routes: {Class: staleness.Routes, ExpireAfter: -time.Second, OnExpire: staleness.FailClosed}},
			"runtime: invalid config: Overrides[routes]: expireAfter: -1s out of range (0, 87600h0m0s]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newEnv(t).config()
			cfg.Overrides = tc.set
			if _, err := New(cfg); err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want %q", err, tc.want)
			}
		})
	}
}
