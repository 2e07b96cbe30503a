package staleness

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[Class]Policy // classes overridden; the rest must be defaults
		err  string
	}{
		{"empty rules keep defaults", `{"rules":[]}`, nil, ""},
		{"full rule", `{"selector":{"app":"reviews"},"rules":[{"resource":"routes","warnAfter":"5m","restrictAfter":"1h","expireAfter":"24h","onExpire":"failClosed","jitter":10}]}`,
			map[Class]Policy{Routes: {Class: Routes, WarnAfter: 5 * time.Minute, RestrictAfter: time.Hour, ExpireAfter: 24 * time.Hour, OnExpire: FailClosed, Jitter: 10}}, ""},
		{"omitted onExpire and jitter keep class defaults", `{"rules":[{"resource":"endpoints","warnAfter":"30s","expireAfter":"2h"}]}`,
			map[Class]Policy{Endpoints: {Class: Endpoints, WarnAfter: 30 * time.Second, ExpireAfter: 2 * time.Hour, OnExpire: ServeStale}}, ""},
		{"revocation keeps its grace", `{"rules":[{"resource":"revocation","onExpire":"drop","jitter":0}]}`,
			map[Class]Policy{Revocation: {Class: Revocation, OnExpire: Drop, Grace: time.Hour}}, ""},
		{"equal bounds allowed, full jitter", `{"rules":[{"resource":"authorization","restrictAfter":"1h","expireAfter":"1h","jitter":100}]}`,
			map[Class]Policy{Authorization: {Class: Authorization, RestrictAfter: time.Hour, ExpireAfter: time.Hour, OnExpire: FailClosed, Jitter: 100}}, ""},
		{"two classes", `{"rules":[{"resource":"listeners","expireAfter":"1h"},{"resource":"clusters","warnAfter":"1m"}]}`,
			map[Class]Policy{Listeners: {Class: Listeners, ExpireAfter: time.Hour, OnExpire: FailClosed, Jitter: 10}, Clusters: {Class: Clusters, WarnAfter: time.Minute, OnExpire: FailClosed, Jitter: 10}}, ""},
		{"unknown field", `{"rules":[{"resource":"routes","warnAfterr":"5m"}]}`, nil, `staleness policy: json: unknown field "warnAfterr"`},
		{"not JSON", `rules: []`, nil, "staleness policy: invalid character 'r' looking for beginning of value"},
		{"trailing data", `{"rules":[]} {}`, nil, "staleness policy: trailing data after the object"},
		{"missing resource", `{"rules":[{"warnAfter":"5m"}]}`, nil, "staleness policy: rules[0]: resource: required"},
		{"unknown resource", `{"rules":[{"resource":"pods"}]}`, nil, `staleness policy: rules[0]: resource: "pods" unknown, want one of [listeners routes clusters endpoints secrets revocation authorization]`},
		{"duplicate resource", `{"rules":[{"resource":"routes"},{"resource":"routes"}]}`, nil, "staleness policy: rules[1]: resource: routes already set by rules[0]"},
		{"bad duration", `{"rules":[{"resource":"routes","warnAfter":"5x"}]}`, nil, `staleness policy: rules[0]: warnAfter: time: unknown unit "x" in duration "5x"`},
		{"zero duration", `{"rules":[{"resource":"routes","expireAfter":"0s"}]}`, nil, "staleness policy: rules[0]: expireAfter: 0s out of range (0, 87600h0m0s]"},
		{"negative duration", `{"rules":[{"resource":"routes","restrictAfter":"-1m"}]}`, nil, "staleness policy: rules[0]: restrictAfter: -1m0s out of range (0, 87600h0m0s]"},
		{"too long", `{"rules":[{"resource":"routes","expireAfter":"90000h"}]}`, nil, "staleness policy: rules[0]: expireAfter: 90000h0m0s out of range (0, 87600h0m0s]"},
		{"bad onExpire", `{"rules":[{"resource":"routes","onExpire":"panic"}]}`, nil, `staleness policy: rules[0]: onExpire: "panic" unknown, want serveStale, failClosed or drop`},
		{"jitter too high", `{"rules":[{"resource":"routes","jitter":101}]}`, nil, "staleness policy: rules[0]: jitter: 101 out of range [0, 100]"},
		{"fractional jitter", `{"rules":[{"resource":"routes","jitter":12.5}]}`, nil, "staleness policy: json: cannot unmarshal number 12.5 into Go struct field Rule.rules.jitter of type int"},
		{"jitter negative", `{"rules":[{"resource":"routes","jitter":-1}]}`, nil, "staleness policy: rules[0]: jitter: -1 out of range [0, 100]"},
		{"warn after expire", `{"rules":[{"resource":"routes","warnAfter":"2h","expireAfter":"1h"}]}`, nil, "staleness policy: rules[0]: warnAfter: 2h0m0s is after expireAfter 1h0m0s"},
		{"warn after restrict", `{"rules":[{"resource":"routes","warnAfter":"2h","restrictAfter":"1h"}]}`, nil, "staleness policy: rules[0]: warnAfter: 2h0m0s is after restrictAfter 1h0m0s"},
		{"restrict after expire", `{"rules":[{"resource":"routes","restrictAfter":"2h","expireAfter":"1h"}]}`, nil, "staleness policy: rules[0]: restrictAfter: 2h0m0s is after expireAfter 1h0m0s"},
		{"too many rules", `{"rules":[` + strings.Repeat(`{"resource":"routes"},`, 7) + `{"resource":"routes"}]}`, nil, "staleness policy: rules: 8 rules, limit 7 (one per resource class)"},
		{"too big", `{"rules":[],"selector":{"a":"` + strings.Repeat("x", MaxRuleSize) + `"}}`, nil, "staleness policy: 65568 bytes, limit 65536"},
		{"wrong type", `{"rules":[{"resource":"routes","jitter":"10"}]}`, nil, "staleness policy: json: cannot unmarshal string into Go struct field Rule.rules.jitter of type int"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v\nwant  %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Defaults()
			for c, p := range tc.want {
				want[c] = p
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse: any input either fails with an error or yields a complete Set whose
// policies satisfy the invariants Evaluate relies on.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"rules":[{"resource":"routes","warnAfter":"5m","restrictAfter":"1h","expireAfter":"24h","onExpire":"failClosed","jitter":10}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse(data)
		if err != nil {
			return
		}
		if len(set) != len(Classes()) {
			t.Fatalf("set has %d classes", len(set))
		}
		for c, p := range set {
			if p.Class != c || !p.OnExpire.valid() || p.Jitter < 0 || p.Jitter > MaxJitter {
				t.Fatalf("invalid policy %+v", p)
			}
			if p.ExpireAfter > 0 && p.WarnAfter > p.ExpireAfter {
				t.Fatalf("warn %v >= expire %v", p.WarnAfter, p.ExpireAfter)
			}
			if eff := p.EffectiveExpireAfter(Seed("n")); eff > p.ExpireAfter || eff < 0 {
				t.Fatalf("effective expiry %v outside [0, %v]", eff, p.ExpireAfter)
			}
		}
	})
}

// TestCheck: the bounds a delivered or operator policy must satisfy, with exact
// errors (the xDS decoder puts them in its NACK).
func TestCheck(t *testing.T) {
	ok := Policy{Class: Routes, WarnAfter: time.Second, RestrictAfter: time.Second, ExpireAfter: MaxDuration, OnExpire: FailClosed, Jitter: MaxJitter}
	tests := []struct {
		name string
		edit func(p *Policy)
		err  string
	}{
		{"valid, equal bounds, limits", func(*Policy) {}, ""},
		{"all never", func(p *Policy) { p.WarnAfter, p.RestrictAfter, p.ExpireAfter = 0, 0, 0 }, ""},
		{"no class", func(p *Policy) { p.Class = "" }, "resource: required"},
		{"unknown class", func(p *Policy) { p.Class = "pods" }, `resource: "pods" unknown, want one of [listeners routes clusters endpoints secrets revocation authorization]`},
		{"negative", func(p *Policy) { p.WarnAfter = -time.Second }, "warnAfter: -1s out of range (0, 87600h0m0s]"},
		{"too long", func(p *Policy) { p.ExpireAfter = MaxDuration + 1 }, "expireAfter: 87600h0m0.000000001s out of range (0, 87600h0m0s]"},
		{"no action", func(p *Policy) { p.OnExpire = "" }, `onExpire: "" unknown, want serveStale, failClosed or drop`},
		{"jitter", func(p *Policy) { p.Jitter = 101 }, "jitter: 101 out of range [0, 100]"},
		{"order", func(p *Policy) { p.RestrictAfter = time.Hour; p.ExpireAfter = time.Minute }, "restrictAfter: 1h0m0s is after expireAfter 1m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.edit(&p)
			err := p.Check()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}
