package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/runtime/staleness"
)

func TestStalenessFailsClosedAndRecovers(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) {
		c.Overrides = overrides(t, "routes=1s/3s/failClosed", "endpoints=1s/2s/serveStale")
	})
	if _, bad := r.Degraded(); bad {
		t.Fatal("degraded before anything is active")
	}
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	level := func(st []staleness.State, c staleness.Class) staleness.Level {
		for _, s := range st {
			if s.Class == c {
				return s.Level
			}
		}
		t.Fatalf("no state for %s", c)
		return 0
	}
	tests := []struct {
		name      string
		now       time.Time
		confirmed time.Time // xDS client's LastConfirmed
		routes    staleness.Level
		endpoints staleness.Level
		degraded  string
	}{
		{"fresh", t0.Add(500 * time.Millisecond), time.Time{}, staleness.Fresh, staleness.Fresh, ""},
		{"warn", t0.Add(2 * time.Second), time.Time{}, staleness.Warn, staleness.Expired, ""}, // endpoints serve stale
		{"expired", t0.Add(4 * time.Second), time.Time{}, staleness.Expired, staleness.Expired, "routes expired (age 4s > expireAfter 3s)"},
		{"still expired", t0.Add(5 * time.Second), time.Time{}, staleness.Expired, staleness.Expired, "routes expired (age 5s > expireAfter 3s)"},
		{"stream confirms again", t0.Add(6 * time.Second), t0.Add(6 * time.Second), staleness.Fresh, staleness.Fresh, ""},
	}
	for _, tc := range tests {
		st := r.Tick(tc.now, tc.confirmed)
		if got := level(st, staleness.Routes); got != tc.routes {
			t.Errorf("%s: routes %s, want %s", tc.name, got, tc.routes)
		}
		if got := level(st, staleness.Endpoints); got != tc.endpoints {
			t.Errorf("%s: endpoints %s, want %s", tc.name, got, tc.endpoints)
		}
		reason, bad := r.Degraded()
		if reason != tc.degraded || bad != (tc.degraded != "") {
			t.Errorf("%s: Degraded = %q %v, want %q", tc.name, reason, bad, tc.degraded)
		}
		ok, body := r.Ready()
		if wantReady := tc.degraded == ""; ok != wantReady {
			t.Errorf("%s: Ready = %v %q", tc.name, ok, body)
		}
		if !ok && body != "routing fails closed: "+tc.degraded {
			t.Errorf("%s: readiness body %q", tc.name, body)
		}
		d := r.Dump()
		if len(d.Staleness) != len(staleness.Classes()) {
			t.Errorf("%s: dump has %d classes", tc.name, len(d.Staleness))
		}
	}
	// Readiness lists the classes that are not fresh.
	r.Tick(t0.Add(8*time.Second), time.Time{})
	if ok, body := r.Ready(); !ok || !strings.HasPrefix(body, "ready\nroutes: age 2s reached warnAfter 1s") {
		t.Fatalf("Ready = %v %q", ok, body)
	}
}

func TestConfirmationIgnoredWhilePending(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) { c.Overrides = overrides(t, "routes=1s/3s") })
	ctx := context.Background()
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(ctx, e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	// A newer push arrives but its manifest never does: the stream's confirmations
	// are of a state that is not the one serving.
	next := mesh("127.0.0.1:9002")
	if err := r.Apply(ctx, e.update(r, next, "v2", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0.Add(4*time.Second), t0.Add(4*time.Second))
	if _, bad := r.Degraded(); !bad {
		t.Fatal("pending candidate's confirmation kept the active config fresh")
	}
}

func TestParseOverrides(t *testing.T) {
	tests := []struct {
		in   []string
		want string // error; "" for success
	}{
		{[]string{"routes=1s/3s"}, ""},
		{[]string{"routes=0/3s/failClosed", "endpoints=1m/0/serveStale"}, ""},
		{[]string{"routes"}, `staleness[0]: "routes": want CLASS=WARN/EXPIRE[/ONEXPIRE]`},
		{[]string{"routes=1s"}, `staleness[0]: "routes=1s": want CLASS=WARN/EXPIRE[/ONEXPIRE]`},
		{[]string{"routes=1s/2s/x/y"}, `staleness[0]: "routes=1s/2s/x/y": want CLASS=WARN/EXPIRE[/ONEXPIRE]`},
		{make([]string, MaxOverrides+1), "staleness: 17 overrides, limit 16"},
	}
	for _, tc := range tests {
		s, err := ParseOverrides(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.in, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%v: err %v, want %q", tc.in, err, tc.want)
		case tc.want == "" && s[staleness.Routes].Jitter != 0:
			t.Errorf("%v: override kept jitter %d", tc.in, s[staleness.Routes].Jitter)
		}
	}
	// Bad values are reported by the staleness rule parser.
	if _, err := ParseOverrides([]string{"routes=1s/2s/explode"}); err == nil || !strings.HasPrefix(err.Error(), "staleness: ") {
		t.Errorf("bad onExpire: %v", err)
	}
	s, err := ParseOverrides([]string{"routes=1s/3s/failClosed"})
	if err != nil || s[staleness.Routes].ExpireAfter != 3*time.Second || s[staleness.Routes].OnExpire != staleness.FailClosed {
		t.Errorf("routes policy = %+v, %v", s[staleness.Routes], err)
	}
}

// TestIdleTickPublishesNothing: ticks that only move time (stream up and
// confirming, or pilot away without a level change) keep the published Dump; a
// level change or a fail-closed verdict publishes a new one.
func TestIdleTickPublishesNothing(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) {
		c.Overrides = overrides(t, "routes=10s/20s/failClosed", "endpoints=10s/20s/serveStale")
	})
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	// The last-known-good save runs on its own goroutine and publishes a Dump when
	// it lands; let it land first, so only the ticks below can publish.
	r.Flush()
	r.Tick(t0, t0)
	steps := []struct {
		name      string
		at        time.Duration
		confirmed bool // the stream confirms at this tick
		publish   bool
	}{
		{"connected 1s", time.Second, true, false},
		{"connected 2s", 2 * time.Second, true, false},
		{"pilot away, fresh", 5 * time.Second, false, false},
		{"pilot away, still fresh", 11 * time.Second, false, false}, // 9s since the 2s confirmation
		{"warn", 12 * time.Second, false, true},
		{"still warn", 15 * time.Second, false, false},
		{"expired: fails closed", 22 * time.Second, false, true},
		{"still expired", 23 * time.Second, false, false},
		{"confirmed again", 24 * time.Second, true, true},
	}
	for _, s := range steps {
		before := r.dump.Load()
		now := t0.Add(s.at)
		var confirmed time.Time
		if s.confirmed {
			confirmed = now
		}
		r.Tick(now, confirmed)
		if published := r.dump.Load() != before; published != s.publish {
			t.Errorf("%s: published %v, want %v", s.name, published, s.publish)
		}
	}
}

// TestDumpAgesAtReadTime: with no Tick, the dump's ages, reasons and
// lastConfirmed follow the clock.
func TestDumpAgesAtReadTime(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(c *Config) { c.Overrides = overrides(t, "routes=10s/20s/failClosed") })
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0, t0)
	for _, tc := range []struct {
		after  time.Duration
		age    float64
		level  string
		reason string
	}{
		{0, 0, "FRESH", "routes: age 0s"},
		{3 * time.Second, 3, "FRESH", "routes: age 3s"},
		{11 * time.Second, 11, "WARN", "routes: age 11s reached warnAfter 10s"},
	} {
		e.clock.Set(t0.Add(tc.after))
		d := r.Dump()
		if !d.LastConfirmed.Equal(t0) {
			t.Errorf("+%v: lastConfirmed %s, want %s", tc.after, d.LastConfirmed, t0)
		}
		var found bool
		for _, s := range d.Staleness {
			if s.Class != string(staleness.Routes) {
				continue
			}
			found = true
			if s.AgeSeconds != tc.age || s.Level != tc.level || s.Reason != tc.reason {
				t.Errorf("+%v: routes age %v level %s reason %q, want %v %s %q", tc.after, s.AgeSeconds, s.Level, s.Reason, tc.age, tc.level, tc.reason)
			}
		}
		if !found {
			t.Fatalf("+%v: no routes class in dump", tc.after)
		}
	}
}

// BenchmarkIdleTick is one staleness tick of a connected, idle sidecar: B/op is
// the garbage an idle sidecar makes per tick interval.
func BenchmarkIdleTick(b *testing.B) {
	e := newEnv(b)
	r := e.runtime()
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		b.Fatal(err)
	}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		r.Tick(now, now)
	}
}

// Endpoints set to failClosed or drop fail routing closed at expiry; serveStale
// keeps serving (the default). Before, both were accepted and did nothing.
func TestExpiredEndpointsFailClosedOrDrop(t *testing.T) {
	for _, tc := range []struct {
		action   string
		degraded string
	}{
		{"serveStale", ""},
		{"failClosed", "endpoints expired (age 3s > expireAfter 2s)"},
		{"drop", "endpoints expired (age 3s > expireAfter 2s)"},
	} {
		t.Run(tc.action, func(t *testing.T) {
			e := newEnv(t)
			r := e.runtime(func(c *Config) {
				c.Overrides = overrides(t, "routes=1h/2h/failClosed", "endpoints=1s/2s/"+tc.action)
			})
			res := mesh("127.0.0.1:9001")
			if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
				t.Fatal(err)
			}
			r.Tick(t0.Add(1500*time.Millisecond), time.Time{})
			if reason, bad := r.Degraded(); bad {
				t.Fatalf("before expiry: degraded %q", reason)
			}
			r.Tick(t0.Add(3*time.Second), time.Time{})
			if reason, bad := r.Degraded(); reason != tc.degraded || bad != (tc.degraded != "") {
				t.Fatalf("after expiry: Degraded = %q %v, want %q", reason, bad, tc.degraded)
			}
		})
	}
}

// TestAuthorizationFailsClosed: past authorization's expireAfter every inbound
// request must be denied (AuthzExpired); routing goes on; serveStale keeps
// enforcing the last policies; drop fails closed too; a confirmation restores.
func TestAuthorizationFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		expired bool
	}{
		{"authorization=1s/3s/failClosed", true},
		{"authorization=1s/3s/drop", true},
		{"authorization=1s/3s/serveStale", false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			e := newEnv(t)
			r := e.runtime(func(c *Config) { c.Overrides = overrides(t, tc.rule, "routes=1m/1h") })
			res := mesh("127.0.0.1:9001")
			if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
				t.Fatal(err)
			}
			r.Tick(t0.Add(2*time.Second), time.Time{})
			if _, bad := r.AuthzExpired(); bad {
				t.Fatal("expired at warn")
			}
			r.Tick(t0.Add(3*time.Second), time.Time{})
			reason, bad := r.AuthzExpired()
			if bad != tc.expired {
				t.Fatalf("AuthzExpired = %q %v at expireAfter, want %v", reason, bad, tc.expired)
			}
			if bad && reason != "authorization expired (age 3s > expireAfter 3s)" {
				t.Errorf("reason %q", reason)
			}
			if _, routing := r.Degraded(); routing {
				t.Error("authorization expiry failed routing closed")
			}
			r.Tick(t0.Add(4*time.Second), t0.Add(4*time.Second))
			if _, bad := r.AuthzExpired(); bad {
				t.Error("still expired after a confirmation")
			}
		})
	}
}

// TestAuthorizationDefault: with no rule, authorization warns at 5m and fails
// closed by 24h (jitter shortens it by at most 10%).
func TestAuthorizationDefault(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(func(*Config) {})
	res := mesh("127.0.0.1:9001")
	if err := r.Apply(context.Background(), e.update(r, res, "v1", e.sign(res, signOpts{}))); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0.Add(21*time.Hour), t0.Add(21*time.Hour)) // routing stays confirmed
	if _, bad := r.AuthzExpired(); bad {
		t.Fatal("expired while confirmed")
	}
	st := r.Tick(t0.Add(21*time.Hour+21*time.Hour+36*time.Minute), time.Time{}) // 21h36m unconfirmed: 90% of 24h
	for _, s := range st {
		if s.Class == staleness.Authorization && s.Level != staleness.Warn {
			t.Errorf("authorization at 90%% of 24h: %s", s.Level)
		}
	}
	if _, bad := r.AuthzExpired(); bad {
		t.Error("expired before 90% of 24h")
	}
	r.Tick(t0.Add(21*time.Hour+24*time.Hour), time.Time{})
	if _, bad := r.AuthzExpired(); !bad {
		t.Error("not expired at 24h")
	}
}
