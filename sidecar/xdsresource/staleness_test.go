package xdsresource_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/weft-mesh/weft/bootstrap/stalenesspb"
	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

func stalenessAny(t testing.TB, m proto.Message) *anypb.Any {
	return &anypb.Any{TypeUrl: xdsresource.StalenessType, Value: mustMarshal(t, m)}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// TestDecodeStaleness: what the sidecar makes of a delivered policy, and the exact
// NACK for each bound it refuses (the bounds pilot's validation enforces).
func TestDecodeStaleness(t *testing.T) {
	routes := func(edit func(r *stalenesspb.Rule)) *stalenesspb.Policy {
		r := &stalenesspb.Rule{Resource: "routes", WarnAfter: dur(time.Second), ExpireAfter: dur(2 * time.Second), OnExpire: "failClosed", Source: "shop/p"}
		if edit != nil {
			edit(r)
		}
		return &stalenesspb.Policy{Rules: []*stalenesspb.Rule{r}}
	}
	tests := []struct {
		name string
		in   *stalenesspb.Policy
		want *xdsresource.Staleness
		err  string
	}{
		{name: "empty: defaults", in: &stalenesspb.Policy{}, want: &xdsresource.Staleness{}},
		{name: "routes, jitter 0 is no jitter", in: routes(nil), want: &xdsresource.Staleness{Rules: []xdsresource.StalenessRule{{
			Policy: staleness.Policy{Class: staleness.Routes, WarnAfter: time.Second, ExpireAfter: 2 * time.Second, OnExpire: staleness.FailClosed}, Source: "shop/p"}}}},
		{name: "omitted onExpire keeps the class default, revocation its grace",
			in: &stalenesspb.Policy{Rules: []*stalenesspb.Rule{{Resource: "revocation", JitterPercent: 100}, {Resource: "endpoints", RestrictAfter: dur(time.Hour)}}},
			want: &xdsresource.Staleness{Rules: []xdsresource.StalenessRule{
				{Policy: staleness.Policy{Class: staleness.Revocation, OnExpire: staleness.FailClosed, Jitter: 100, Grace: time.Hour}},
				{Policy: staleness.Policy{Class: staleness.Endpoints, RestrictAfter: time.Hour, OnExpire: staleness.ServeStale}}}}},
		{name: "longest", in: routes(func(r *stalenesspb.Rule) { r.ExpireAfter = dur(staleness.MaxDuration) }), want: &xdsresource.Staleness{Rules: []xdsresource.StalenessRule{{
			Policy: staleness.Policy{Class: staleness.Routes, WarnAfter: time.Second, ExpireAfter: staleness.MaxDuration, OnExpire: staleness.FailClosed}, Source: "shop/p"}}}},
		{name: "too long", in: routes(func(r *stalenesspb.Rule) { r.ExpireAfter = dur(staleness.MaxDuration + time.Hour) }),
			err: `staleness "staleness": rules[0]: expireAfter: 87601h0m0s out of range (0, 87600h0m0s]`},
		{name: "zero", in: routes(func(r *stalenesspb.Rule) { r.WarnAfter = dur(0) }),
			err: `staleness "staleness": rules[0].warn_after: must be positive (leave it unset for never)`},
		{name: "negative", in: routes(func(r *stalenesspb.Rule) { r.RestrictAfter = dur(-time.Second) }),
			err: `staleness "staleness": rules[0].restrict_after: must not be negative`},
		{name: "order", in: routes(func(r *stalenesspb.Rule) { r.WarnAfter = dur(time.Hour) }),
			err: `staleness "staleness": rules[0]: warnAfter: 1h0m0s is after expireAfter 2s`},
		{name: "jitter", in: routes(func(r *stalenesspb.Rule) { r.JitterPercent = 101 }),
			err: `staleness "staleness": rules[0]: jitter: 101 out of range [0, 100]`},
		{name: "action", in: routes(func(r *stalenesspb.Rule) { r.OnExpire = "panic" }),
			err: `staleness "staleness": rules[0]: onExpire: "panic" unknown, want serveStale, failClosed or drop`},
		{name: "no class", in: routes(func(r *stalenesspb.Rule) { r.Resource = "" }), err: `staleness "staleness": rules[0]: resource: required`},
		{name: "unknown class", in: routes(func(r *stalenesspb.Rule) { r.Resource = "pods" }),
			err: `staleness "staleness": rules[0]: resource: "pods" unknown, want one of [listeners routes clusters endpoints secrets revocation authorization]`},
		{name: "duplicate", in: &stalenesspb.Policy{Rules: []*stalenesspb.Rule{{Resource: "routes"}, {Resource: "routes"}}},
			err: `staleness "staleness": rules[1].resource: routes already set by rules[0]`},
		{name: "too many", in: &stalenesspb.Policy{Rules: make([]*stalenesspb.Rule, 8)},
			err: `staleness "staleness": rules: 8 rules, limit 7 (one per resource class)`},
		{name: "source too long", in: routes(func(r *stalenesspb.Rule) { r.Source = string(make([]byte, xdsresource.MaxSourceBytes+1)) }),
			err: `staleness "staleness": rules[0].source: is 1025 bytes, limit 1024`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, v, err := xdsresource.Decode(xdsresource.StalenessType, stalenessAny(t, tc.in))
			if name != stalenesspb.Name {
				t.Errorf("name %q, want %q", name, stalenesspb.Name)
			}
			if tc.err != "" {
				if err == nil || err.Error() != tc.err || !errors.Is(err, xdsresource.ErrInvalid) || v != nil {
					t.Fatalf("err = %v (value %v)\nwant  %s", err, v, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, v); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
	// protobuf-go randomises the spacing of its own messages: only our prefix is exact.
	for in, prefix := range map[string]string{
		"\xff": "invalid resource: staleness: malformed protobuf: ",
		string(mustMarshal(t, routes(func(r *stalenesspb.Rule) { r.ExpireAfter = &durationpb.Duration{Seconds: 1, Nanos: -1} }))): `staleness "staleness": rules[0].expire_after: `,
	} {
		_, v, err := xdsresource.Decode(xdsresource.StalenessType, &anypb.Any{TypeUrl: xdsresource.StalenessType, Value: []byte(in)})
		if err == nil || !strings.HasPrefix(err.Error(), prefix) || !errors.Is(err, xdsresource.ErrInvalid) || v != nil {
			t.Errorf("err = %v, want prefix %q", err, prefix)
		}
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeStaleness: any bytes either fail with ErrInvalid or give a Staleness
// whose every rule passes Check, one per class.
func FuzzDecodeStaleness(f *testing.F) {
	for _, m := range []*stalenesspb.Policy{{}, {Rules: []*stalenesspb.Rule{
		{Resource: "routes", WarnAfter: dur(time.Second), RestrictAfter: dur(time.Second), ExpireAfter: dur(2 * time.Second), OnExpire: "failClosed", JitterPercent: 10, Source: "shop/p"},
		{Resource: "endpoints", WarnAfter: dur(time.Minute)},
	}}} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		name, v, err := xdsresource.Decode(xdsresource.StalenessType, &anypb.Any{TypeUrl: xdsresource.StalenessType, Value: b})
		if err != nil {
			if !errors.Is(err, xdsresource.ErrInvalid) || v != nil {
				t.Fatalf("error %v with value %v", err, v)
			}
			return
		}
		s, ok := v.(*xdsresource.Staleness)
		if !ok || name != stalenesspb.Name {
			t.Fatalf("%q: %T", name, v)
		}
		seen := map[staleness.Class]bool{}
		for _, r := range s.Rules {
			if err := r.Policy.Check(); err != nil || seen[r.Policy.Class] {
				t.Fatalf("rule %+v: %v (dup %v)", r, err, seen[r.Policy.Class])
			}
			seen[r.Policy.Class] = true
		}
	})
}
