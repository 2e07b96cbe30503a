package staleness

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func noJitter(c Class) Policy {
	p := Default(c)
	p.Jitter = 0
	return p
}

func TestEvaluate(t *testing.T) {
	routes := noJitter(Routes)
	restricted := routes
	restricted.RestrictAfter = time.Hour
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name      string
		p         Policy
		confirmed time.Time
		deadline  time.Time
		now       time.Time
		want      State
	}{
		{"routes just confirmed", routes, t0, time.Time{}, t0,
			State{Class: Routes, Level: Fresh, ExpiresAt: at(24 * time.Hour), Next: at(5 * time.Minute), Reason: "routes: age 0s"}},
		{"routes just before warn", routes, t0, time.Time{}, at(5*time.Minute - time.Second),
			State{Class: Routes, Level: Fresh, Age: 5*time.Minute - time.Second, ExpiresAt: at(24 * time.Hour), Next: at(5 * time.Minute), Reason: "routes: age 4m59s"}},
		{"routes at warn", routes, t0, time.Time{}, at(5 * time.Minute),
			State{Class: Routes, Level: Warn, Age: 5 * time.Minute, ExpiresAt: at(24 * time.Hour), Next: at(24 * time.Hour), Reason: "routes: age 5m0s reached warnAfter 5m0s"}},
		{"routes just before expiry", routes, t0, time.Time{}, at(24*time.Hour - time.Nanosecond),
			State{Class: Routes, Level: Warn, Age: 24*time.Hour - time.Nanosecond, ExpiresAt: at(24 * time.Hour), Next: at(24 * time.Hour), Reason: "routes: age 23h59m59.999999999s reached warnAfter 5m0s"}},
		{"routes at expiry fail closed", routes, t0, time.Time{}, at(24 * time.Hour),
			State{Class: Routes, Level: Expired, Age: 24 * time.Hour, Action: FailClosed, ExpiresAt: at(24 * time.Hour), Reason: "routes: age 24h0m0s reached expireAfter 24h0m0s"}},
		{"routes long expired", routes, t0, time.Time{}, at(30 * time.Hour),
			State{Class: Routes, Level: Expired, Age: 30 * time.Hour, Action: FailClosed, ExpiresAt: at(24 * time.Hour), Reason: "routes: age 30h0m0s reached expireAfter 24h0m0s"}},
		{"restricted", restricted, t0, time.Time{}, at(time.Hour),
			State{Class: Routes, Level: Restricted, Age: time.Hour, ExpiresAt: at(24 * time.Hour), Next: at(24 * time.Hour), Reason: "routes: age 1h0m0s reached restrictAfter 1h0m0s"}},
		{"warn, next is restrict", restricted, t0, time.Time{}, at(10 * time.Minute),
			State{Class: Routes, Level: Warn, Age: 10 * time.Minute, ExpiresAt: at(24 * time.Hour), Next: at(time.Hour), Reason: "routes: age 10m0s reached warnAfter 5m0s"}},
		{"endpoints warn after 1m", Default(Endpoints), t0, time.Time{}, at(time.Minute),
			State{Class: Endpoints, Level: Warn, Age: time.Minute, Reason: "endpoints: age 1m0s reached warnAfter 1m0s"}},
		{"endpoints never expire", Default(Endpoints), t0, time.Time{}, at(1000 * time.Hour),
			State{Class: Endpoints, Level: Warn, Age: 1000 * time.Hour, Reason: "endpoints: age 1000h0m0s reached warnAfter 1m0s"}},
		{"never confirmed", routes, time.Time{}, time.Time{}, t0,
			State{Class: Routes, Level: Expired, Action: FailClosed, Reason: "routes: never confirmed"}},
		{"clock stepped back", routes, t0, time.Time{}, at(-time.Hour),
			State{Class: Routes, Level: Fresh, ExpiresAt: at(24 * time.Hour), Next: at(5 * time.Minute), Reason: "routes: age 0s"}},
		{"authorization expires 24h", noJitter(Authorization), t0, time.Time{}, at(24 * time.Hour),
			State{Class: Authorization, Level: Expired, Age: 24 * time.Hour, Action: FailClosed, ExpiresAt: at(24 * time.Hour), Reason: "authorization: age 24h0m0s reached expireAfter 24h0m0s"}},
		{"secret before NotAfter", Default(Secrets), t0, at(48 * time.Hour), at(47 * time.Hour),
			State{Class: Secrets, Level: Fresh, Age: 47 * time.Hour, ExpiresAt: at(48 * time.Hour), Next: at(48 * time.Hour), Reason: "secrets: age 47h0m0s"}},
		{"secret at NotAfter", Default(Secrets), t0, at(48 * time.Hour), at(48 * time.Hour),
			State{Class: Secrets, Level: Expired, Age: 48 * time.Hour, Action: FailClosed, ExpiresAt: at(48 * time.Hour), Reason: "secrets: past deadline 2026-01-03T00:00:00Z (grace 0s)"}},
		{"secret without deadline", Default(Secrets), t0, time.Time{}, at(1000 * time.Hour),
			State{Class: Secrets, Level: Fresh, Age: 1000 * time.Hour, Reason: "secrets: age 1000h0m0s"}},
		{"revocation within grace", Default(Revocation), t0, at(2 * time.Hour), at(2*time.Hour + 59*time.Minute),
			State{Class: Revocation, Level: Fresh, Age: 2*time.Hour + 59*time.Minute, ExpiresAt: at(3 * time.Hour), Next: at(3 * time.Hour), Reason: "revocation: age 2h59m0s"}},
		{"revocation past NextUpdate+1h", Default(Revocation), t0, at(2 * time.Hour), at(3 * time.Hour),
			State{Class: Revocation, Level: Expired, Age: 3 * time.Hour, Action: FailClosed, ExpiresAt: at(3 * time.Hour), Reason: "revocation: past deadline 2026-01-01T02:00:00Z (grace 1h0m0s)"}},
		{"deadline before age expiry wins", routes, t0, at(time.Hour), at(time.Hour),
			State{Class: Routes, Level: Expired, Age: time.Hour, Action: FailClosed, ExpiresAt: at(time.Hour), Reason: "routes: past deadline 2026-01-01T01:00:00Z (grace 0s)"}},
		{"age expiry before deadline wins", routes, t0, at(48 * time.Hour), at(24 * time.Hour),
			State{Class: Routes, Level: Expired, Age: 24 * time.Hour, Action: FailClosed, ExpiresAt: at(24 * time.Hour), Reason: "routes: age 24h0m0s reached expireAfter 24h0m0s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := EvaluateWithDeadline(tc.p, tc.confirmed, tc.deadline, tc.now, 42)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.deadline.IsZero() {
				if diff := cmp.Diff(got, Evaluate(tc.p, tc.confirmed, tc.now, 42)); diff != "" {
					t.Errorf("Evaluate differs from EvaluateWithDeadline(zero):\n%s", diff)
				}
			}
		})
	}
}

// TestJitter: expiry is shortened by at most Jitter percent, the same node always
// gets the same value, and a fleet spreads over the range.
func TestJitter(t *testing.T) {
	p := Default(Routes) // 24h, 10%
	lo, hi := 24*time.Hour, time.Duration(0)
	for i := range 200 {
		seed := Seed("node-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		d := p.EffectiveExpireAfter(seed)
		if d > 24*time.Hour || d < 24*time.Hour*9/10 {
			t.Fatalf("seed %d: expireAfter %v outside [21h36m, 24h]", seed, d)
		}
		if again := p.EffectiveExpireAfter(seed); again != d {
			t.Fatalf("not deterministic: %v then %v", d, again)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if spread := hi - lo; spread < 2*time.Hour {
		t.Fatalf("200 nodes spread over only %v of a 2h24m window", spread)
	}
	// The jittered expiry is what Evaluate applies.
	seed := Seed("node-x")
	eff := p.EffectiveExpireAfter(seed)
	if s := Evaluate(p, t0, t0.Add(eff-time.Nanosecond), seed); s.Level != Warn {
		t.Fatalf("just before jittered expiry: %v", s.Level)
	}
	if s := Evaluate(p, t0, t0.Add(eff), seed); s.Level != Expired || !s.ExpiresAt.Equal(t0.Add(eff)) {
		t.Fatalf("at jittered expiry: %v at %v", s.Level, s.ExpiresAt)
	}
	// Classes of one node get independent fractions.
	a, c := Default(Routes), Default(Clusters)
	if a.EffectiveExpireAfter(seed) == c.EffectiveExpireAfter(seed) {
		t.Fatalf("routes and clusters jitter identically")
	}
	if p0 := noJitter(Routes); p0.EffectiveExpireAfter(seed) != 24*time.Hour {
		t.Fatalf("zero jitter changed expiry")
	}
}

func TestDefaultsAndEvaluateAll(t *testing.T) {
	now := t0.Add(25 * time.Hour)
	states := Defaults().EvaluateAll(t0, map[Class]time.Time{Secrets: t0.Add(48 * time.Hour), Revocation: t0.Add(time.Hour)}, now, Seed("n1"))
	got := map[Class]string{}
	for _, s := range states {
		got[s.Class] = s.Level.String() + "/" + string(s.Action)
	}
	want := map[Class]string{
		Listeners: "EXPIRED/failClosed", Routes: "EXPIRED/failClosed", Clusters: "EXPIRED/failClosed",
		Endpoints: "WARN/", Secrets: "FRESH/", Revocation: "EXPIRED/failClosed", Authorization: "EXPIRED/failClosed",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if len(states) != len(Classes()) || states[0].Class != Listeners {
		t.Fatalf("states not in Classes order")
	}
}

func TestLevelString(t *testing.T) {
	for l, want := range map[Level]string{Fresh: "FRESH", Warn: "WARN", Restricted: "RESTRICTED", Expired: "EXPIRED", 9: "Level(9)"} {
		if l.String() != want {
			t.Errorf("%d: %q, want %q", int(l), l.String(), want)
		}
	}
}
