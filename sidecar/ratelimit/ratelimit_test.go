package ratelimit

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the epoch of every test bucket (no monotonic reading: the tests drive
// the clock by hand).
var t0 = time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one take at t0+at.
type step struct {
	at         time.Duration
	ok         bool
	retryAfter time.Duration // checked when !ok
}

func run(t *testing.T, l *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		ok, ra := l.Allow(at(s.at))
		if ok != s.ok || (!ok && ra != s.retryAfter) {
			t.Fatalf("step %d (take at +%v): got ok=%v retryAfter=%v, want ok=%v retryAfter=%v", i, s.at, ok, ra, s.ok, s.retryAfter)
		}
	}
}

func mustNew(t *testing.T, c Config) *Limiter {
	t.Helper()
	l, err := New(c, t0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestBucket(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			// Burst 3 at 10 rps (interval 100ms): three takes at once, the fourth
			// is refused until one interval has passed.
			name: "burst at bound and one past",
			cfg:  Config{RequestsPerSecond: 10, Burst: 3},
			steps: []step{
				{0, true, 0}, {0, true, 0}, {0, true, 0},
				{0, false, 100 * ms},
			},
		},
		{
			name: "refill one token per interval",
			cfg:  Config{RequestsPerSecond: 10, Burst: 2},
			steps: []step{
				{0, true, 0}, {0, true, 0},
				{50 * ms, false, 50 * ms},            // half an interval: no whole token yet
				{100*ms - time.Nanosecond, false, 1}, // one nanosecond short
				{100 * ms, true, 0},                  // exactly one interval: one token
				{100 * ms, false, 100 * ms},
				{250 * ms, true, 0}, // 1.5 tokens back: one whole
				{250 * ms, false, 50 * ms},
				{300 * ms, true, 0},
				{300 * ms, false, 100 * ms},
			},
		},
		{
			// A refusal spends nothing: the bucket is where it was.
			name: "refusals spend no token",
			cfg:  Config{RequestsPerSecond: 1, Burst: 1},
			steps: []step{
				{0, true, 0},
				{0, false, time.Second}, {0, false, time.Second}, {500 * ms, false, 500 * ms},
				{time.Second, true, 0},
			},
		},
		{
			// Idle far longer than a refill: the bucket holds burst, no more.
			name: "long idle fills to burst only",
			cfg:  Config{RequestsPerSecond: 100, Burst: 5},
			steps: append(append(repeat(5, step{0, true, 0}),
				repeat(5, step{24 * time.Hour, true, 0})...),
				step{24 * time.Hour, false, 10 * ms}),
		},
		{
			// The clock going backwards must not mint tokens: an earlier now sees
			// the bucket emptier, never fuller.
			name: "clock going backwards",
			cfg:  Config{RequestsPerSecond: 10, Burst: 2},
			steps: []step{
				{time.Second, true, 0}, {time.Second, true, 0},
				{time.Second, false, 100 * ms},
				{500 * ms, false, 600 * ms}, // back by 0.5s: still empty, further to wait
				{-time.Hour, false, time.Hour + 1100*ms},
				{time.Second, false, 100 * ms}, // forward again: as it was
				{1100 * ms, true, 0},
				{1100 * ms, false, 100 * ms},
			},
		},
		{
			name:  "fractional rate below one per second",
			cfg:   Config{RequestsPerSecond: 0.5}, // burst defaults to 1
			steps: []step{{0, true, 0}, {time.Second, false, time.Second}, {2 * time.Second, true, 0}},
		},
		{
			name:  "default burst is one second of requests",
			cfg:   Config{RequestsPerSecond: 4},
			steps: append(repeat(4, step{0, true, 0}), step{0, false, 250 * ms}),
		},
		{
			name: "dry run lets everything through",
			cfg:  Config{RequestsPerSecond: 1, Burst: 1, DryRun: true},
			steps: []step{
				{0, true, 0}, {0, true, 0}, {0, true, 0},
				{time.Second, true, 0},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, mustNew(t, tc.cfg), tc.steps)
		})
	}
}

// TestRateOverTime: over a long run of takes at a steady pace above (mostly four times) the
// rate, exactly burst + rate × elapsed succeed, for rates whose interval is and
// is not a whole number of nanoseconds.
func TestRateOverTime(t *testing.T) {
	for _, rps := range []float64{3, 7, 100, 333, 1000, 12345, 1e6, 3e7, 7e8} {
		l := mustNew(t, Config{RequestsPerSecond: rps, Burst: 10})
		const takes = 40000
		step := max(time.Duration(float64(time.Second)/rps/4), 1) // at 7e8 rps: 1 ns, 1.4 takes per token
		got := 0
		for i := range takes {
			if ok, _ := l.Allow(at(time.Duration(i) * step)); ok {
				got++
			}
		}
		elapsed := time.Duration(takes-1) * step
		want := 10 + rps*elapsed.Seconds()
		// One for the take straddling the end, and the interval's rounding to a
		// whole tick: at most half a tick per interval.
		slack := 1 + want*0.5/(float64(time.Second<<tickShift)/rps)
		if math.Abs(float64(got)-want) > slack {
			t.Errorf("rps %v: %d takes succeeded over %v, want %.1f ± %.1f", rps, got, elapsed, want, slack)
		}
	}
}

func TestStats(t *testing.T) {
	l := mustNew(t, Config{RequestsPerSecond: 1, Burst: 2})
	run(t, l, []step{{0, true, 0}, {0, true, 0}, {0, false, time.Second}, {0, false, time.Second}, {0, false, time.Second}})
	if got, want := l.Stats(), (Stats{Allowed: 2, Rejected: 3}); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	d := mustNew(t, Config{RequestsPerSecond: 1, Burst: 2, DryRun: true})
	run(t, d, repeat(5, step{0, true, 0}))
	// In dry run a take that finds no token spends none: at +1s one token is
	// back (not zero, as if the three had been spent).
	run(t, d, []step{{time.Second, true, 0}})
	if got, want := d.Stats(), (Stats{Allowed: 3, DryRunRejected: 3}); got != want {
		t.Fatalf("dry-run stats %+v, want %+v", got, want)
	}
	if d.Tokens(at(time.Second)) != 0 {
		t.Fatalf("dry-run bucket has %d tokens after spending them all", d.Tokens(at(time.Second)))
	}
}

func TestOffAndNil(t *testing.T) {
	var zero Limiter
	var nilL *Limiter
	for name, l := range map[string]*Limiter{"zero": &zero, "nil": nilL} {
		for range 1000 {
			if ok, _ := l.Allow(t0); !ok {
				t.Fatalf("%s limiter refused", name)
			}
		}
		if l.Enabled() || l.Stats() != (Stats{}) || l.Config() != (Config{}) {
			t.Fatalf("%s limiter: enabled %v, stats %+v, config %+v", name, l.Enabled(), l.Stats(), l.Config())
		}
	}
}

func TestConfigure(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		first  Config
		before []step // at t0
		then   Config // applied at +100ms
		after  []step
	}{
		{
			// The swap every EDS push does: same rate, the bucket stays empty.
			name:   "same config keeps the bucket",
			first:  Config{RequestsPerSecond: 10, Burst: 5},
			before: repeat(5, step{0, true, 0}),
			then:   Config{RequestsPerSecond: 10, Burst: 5},
			after:  []step{{100 * ms, true, 0}, {100 * ms, false, 100 * ms}},
		},
		{
			name:   "dry run turned on keeps the bucket",
			first:  Config{RequestsPerSecond: 10, Burst: 5},
			before: repeat(5, step{0, true, 0}),
			then:   Config{RequestsPerSecond: 10, Burst: 5, DryRun: true},
			after:  []step{{100 * ms, true, 0}, {100 * ms, true, 0}, {100 * ms, true, 0}},
		},
		{
			// 4 of 5 tokens in use at 10 rps when the rate doubles: still 4 in use
			// (1 free), refilling at 20 rps.
			name:   "new rate keeps the tokens in use",
			first:  Config{RequestsPerSecond: 10, Burst: 5},
			before: repeat(5, step{0, true, 0}),
			then:   Config{RequestsPerSecond: 20, Burst: 5},
			after:  []step{{100 * ms, true, 0}, {100 * ms, false, 50 * ms}, {150 * ms, true, 0}},
		},
		{
			// A smaller burst caps the debt: an empty bucket stays empty, not deeper.
			name:   "smaller burst",
			first:  Config{RequestsPerSecond: 10, Burst: 10},
			before: repeat(10, step{0, true, 0}),
			then:   Config{RequestsPerSecond: 10, Burst: 2},
			after:  []step{{100 * ms, false, 100 * ms}, {200 * ms, true, 0}, {300 * ms, true, 0}, {300 * ms, false, 100 * ms}},
		},
		{
			// A bigger burst adds room, not tokens: the ones in use stay in use.
			name:   "bigger burst",
			first:  Config{RequestsPerSecond: 10, Burst: 2},
			before: repeat(2, step{0, true, 0}),
			then:   Config{RequestsPerSecond: 10, Burst: 4},
			after:  append(repeat(3, step{100 * ms, true, 0}), step{100 * ms, false, 100 * ms}),
		},
		{
			name:   "off then on starts full",
			first:  Config{RequestsPerSecond: 10, Burst: 2},
			before: repeat(2, step{0, true, 0}),
			then:   Config{},
			after:  repeat(10, step{100 * ms, true, 0}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.first)
			run(t, l, tc.before)
			if err := l.Configure(tc.then, at(100*ms)); err != nil {
				t.Fatal(err)
			}
			run(t, l, tc.after)
		})
	}
	t.Run("on again after off", func(t *testing.T) {
		l := mustNew(t, Config{RequestsPerSecond: 1, Burst: 1})
		run(t, l, []step{{0, true, 0}, {0, false, time.Second}})
		if err := l.Configure(Config{}, t0); err != nil {
			t.Fatal(err)
		}
		if err := l.Configure(Config{RequestsPerSecond: 1, Burst: 1}, t0); err != nil {
			t.Fatal(err)
		}
		run(t, l, []step{{0, true, 0}, {0, false, time.Second}})
		if got, want := l.Stats(), (Stats{Allowed: 2, Rejected: 2}); got != want {
			t.Fatalf("stats %+v, want %+v (counters survive reconfiguration)", got, want)
		}
	})
	t.Run("error changes nothing", func(t *testing.T) {
		l := mustNew(t, Config{RequestsPerSecond: 1, Burst: 1})
		run(t, l, []step{{0, true, 0}})
		if err := l.Configure(Config{RequestsPerSecond: -1}, t0); !errors.Is(err, ErrConfig) {
			t.Fatalf("got %v, want ErrConfig", err)
		}
		if got := l.Config(); got != (Config{RequestsPerSecond: 1, Burst: 1}) {
			t.Fatalf("config %+v after a failed Configure", got)
		}
		run(t, l, []step{{0, false, time.Second}})
	})
}

func TestValidate(t *testing.T) {
	year := MaxFillTime.Seconds()
	for _, tc := range []struct {
		cfg  Config
		want string // "" valid
	}{
		{Config{}, ""}, // off
		{Config{RequestsPerSecond: 1}, ""},
		{Config{RequestsPerSecond: MaxRequestsPerSecond}, ""},                   // at the bound
		{Config{RequestsPerSecond: MaxRequestsPerSecond * (1 + 1e-9)}, "above"}, // one past
		{Config{RequestsPerSecond: 1, Burst: uint32(year)}, ""},                 // fills in exactly MaxFillTime
		{Config{RequestsPerSecond: 1, Burst: uint32(year) + 1}, "refill"},       // one past
		{Config{RequestsPerSecond: 1 / year}, ""},                               // one token per MaxFillTime
		{Config{RequestsPerSecond: 1 / year * (1 - 1e-9)}, "refill"},
		{Config{RequestsPerSecond: -1}, "negative"},
		{Config{RequestsPerSecond: math.NaN()}, "finite"},
		{Config{RequestsPerSecond: math.Inf(1)}, "finite"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestBoundsArithmetic: at the extremes the bucket still counts right (no
// overflow): the slowest refill, the fastest rate, and a now at the clock's
// bound.
func TestBoundsArithmetic(t *testing.T) {
	slow := mustNew(t, Config{RequestsPerSecond: 1, Burst: uint32(MaxFillTime.Seconds())})
	if n := slow.Tokens(t0); n != uint32(MaxFillTime.Seconds()) {
		t.Fatalf("slowest bucket starts with %d tokens", n)
	}
	fast := mustNew(t, Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: 1})
	run(t, fast, []step{{0, true, 0}, {0, false, 1}, {1, true, 0}})
	far := mustNew(t, Config{RequestsPerSecond: 1, Burst: 1})
	run(t, far, []step{{100 * 365 * 24 * time.Hour, true, 0}, {200 * 365 * 24 * time.Hour, false, time.Second}})
}

func TestDefaultBurst(t *testing.T) {
	for rps, want := range map[float64]uint32{0.001: 1, 0.5: 1, 1: 1, 1.01: 2, 2.9: 3, 100: 100, MaxRequestsPerSecond: MaxRequestsPerSecond} {
		if got := DefaultBurst(rps); got != want {
			t.Errorf("DefaultBurst(%v) = %d, want %d", rps, got, want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, 1: 1, time.Second: 1, time.Second + 1: 2, 2500 * time.Millisecond: 3} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestConcurrentTakes: however many goroutines take at once, no more than the
// budget (burst + rate × elapsed) succeeds, and every take is counted once.
func TestConcurrentTakes(t *testing.T) {
	const (
		goroutines = 8
		perG       = 5000
		burst      = 50
		budget     = burst + 1000 // one second at 1000 rps
	)
	for _, tc := range []struct {
		name string
		// now is the time of goroutine g's j-th take; shared is a clock all of
		// them advance, one step per take.
		now func(g, j int, shared *atomic.Int64) time.Duration
		min int // the fewest successes the clock allows
	}{
		{
			// One shared clock ticking through 1s: the takes' nows are out of order
			// by at most a few steps, so nearly the whole budget is spent.
			name: "shared clock",
			now: func(_, _ int, shared *atomic.Int64) time.Duration {
				return time.Duration(shared.Add(1)-1) * time.Second / (goroutines * perG)
			},
			min: budget - 2*goroutines,
		},
		{
			// Each goroutine its own clock, half of them walking backwards: the
			// budget still bounds what succeeds (no time travel mints tokens).
			name: "clocks walking both ways",
			now: func(g, j int, _ *atomic.Int64) time.Duration {
				d := time.Duration(j) * time.Second / perG
				if g%2 == 1 {
					d = time.Second - d
				}
				return d
			},
			min: burst,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, Config{RequestsPerSecond: 1000, Burst: burst})
			var clock, ok atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for j := range perG {
						if allowed, _ := l.Allow(at(tc.now(g, j, &clock))); allowed {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			total := int(ok.Load())
			if total > budget || total < tc.min {
				t.Fatalf("%d takes succeeded, want %d..%d", total, tc.min, budget)
			}
			st := l.Stats()
			if st.Allowed != uint64(total) || st.Allowed+st.Rejected != goroutines*perG {
				t.Fatalf("stats %+v, want %d allowed of %d", st, total, goroutines*perG)
			}
		})
	}
}

// TestConcurrentConfigure: takes racing reconfigurations (-race).
func TestConcurrentConfigure(t *testing.T) {
	l := mustNew(t, Config{RequestsPerSecond: 100, Burst: 10})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 1000 {
			c := Config{RequestsPerSecond: float64(100 + i%3), Burst: uint32(10 + i%2), DryRun: i%5 == 0}
			if err := l.Configure(c, at(time.Duration(i)*time.Millisecond)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for i := range 5000 {
				l.Allow(at(time.Duration(i) * 200 * time.Microsecond))
			}
		})
	}
	wg.Wait()
	if st := l.Stats(); st.Allowed+st.Rejected+st.DryRunRejected != 10000 {
		t.Fatalf("stats %+v do not add up to 10000 takes", st)
	}
}

// BenchmarkAllow is the rate-limit take of the request path (make bench): a
// token taken (with wall-clock times and, as on the request path, monotonic
// ones), a take refused, a cluster without a limit, and takes from every core
// at once on one bucket (the CAS contended). 0 allocs/op in all of them.
func BenchmarkAllow(b *testing.B) {
	b.Run("allowed", func(b *testing.B) {
		l, _ := New(Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: math.MaxUint32 / 2}, t0)
		now := at(time.Second)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(now)
		}
	})
	b.Run("allowed-monotonic", func(b *testing.B) {
		// As on the request path: the epoch and now both carry monotonic readings.
		l, _ := New(Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: math.MaxUint32 / 2}, time.Now())
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(now)
		}
	})
	b.Run("rejected", func(b *testing.B) {
		l, _ := New(Config{RequestsPerSecond: 1, Burst: 1}, t0)
		l.Allow(t0)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(t0)
		}
	})
	b.Run("off", func(b *testing.B) {
		var l Limiter
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(t0)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l, _ := New(Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: math.MaxUint32 / 2}, t0)
		now := at(time.Second)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow(now)
			}
		})
	})
}
