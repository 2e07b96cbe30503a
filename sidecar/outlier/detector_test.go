package outlier

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// base is Envoy's defaults with only the consecutive 5xx detector enforcing, as
// pilot sends a policy naming consecutive5xx alone.
func base() *Config {
	return &Config{
		Consecutive5xx: 5, ConsecutiveGatewayFailure: 5, ConsecutiveLocalOriginFailure: 5,
		EnforcingConsecutive5xx: 100, EnforcingConsecutiveGatewayFailure: 0, EnforcingConsecutiveLocalOriginFailure: 100,
		Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second, MaxEjectionTime: 300 * time.Second,
		MaxEjectionPercent: 100,
	}
}

func always() uint64 { return 0 } // every enforcing draw passes, jitter 0

func newDet(t *testing.T, c *Config, n int) (*Detector, []*Host) {
	t.Helper()
	d := New("outbound|80||svc", nil)
	if err := d.Configure(c); err != nil {
		t.Fatal(err)
	}
	hs := make([]*Host, n)
	for i := range hs {
		hs[i] = &Host{Addr: fmt.Sprintf("10.0.0.%d:80", i+1)}
		d.Add(hs[i])
	}
	return d, hs
}

// observe feeds o to h and handles a trip at now; it returns the ejection, if any.
func observe(d *Detector, h *Host, o Outcome, now time.Time) (Event, bool) {
	if t := d.Observe(h, o); t != 0 {
		return d.Trip(h, t, now, always)
	}
	return Event{}, false
}

// TestConsecutiveTripsAtThreshold: each consecutive detector ejects on exactly the
// threshold-th failure in a row, not one before; anything that is not a failure
// for it starts the run again.
func TestConsecutiveTripsAtThreshold(t *testing.T) {
	split := func(c *Config) { c.SplitExternalLocalOriginErrors = true }
	gwOnly := func(c *Config) {
		c.Consecutive5xx, c.EnforcingConsecutiveGatewayFailure = 0, 100
	}
	for _, tc := range []struct {
		name      string
		mod       func(*Config)
		threshold uint32
		set       func(c *Config, n uint32)
		fail      Outcome
		reset     Outcome // breaks the run
		notReset  Outcome // neither counts nor breaks the run
		kind      Kind
	}{
		{"5xx/500", nil, 5, func(c *Config, n uint32) { c.Consecutive5xx = n }, 500, 200, 0, KindConsecutive5xx},
		{"5xx/503", nil, 3, func(c *Config, n uint32) { c.Consecutive5xx = n; c.ConsecutiveGatewayFailure = 0 }, 503, 404, 0, KindConsecutive5xx},
		{"5xx/1", nil, 1, func(c *Config, n uint32) { c.Consecutive5xx = n }, 599, 499, 0, KindConsecutive5xx},
		// Split off: a connect failure is a 503, a timeout a 504, a reset a 503.
		{"5xx/connect-failed-no-split", nil, 4, func(c *Config, n uint32) { c.Consecutive5xx = n; c.ConsecutiveGatewayFailure = 0 }, ConnectFailed, 200, ConnectSucceeded, KindConsecutive5xx},
		{"5xx/timeout-no-split", nil, 4, func(c *Config, n uint32) { c.Consecutive5xx = n; c.ConsecutiveGatewayFailure = 0 }, Timeout, 200, ConnectSucceeded, KindConsecutive5xx},
		{"5xx/reset-no-split", nil, 4, func(c *Config, n uint32) { c.Consecutive5xx = n; c.ConsecutiveGatewayFailure = 0 }, Reset, 200, ConnectSucceeded, KindConsecutive5xx},
		// Split on: local-origin results are not 5xx at all.
		{"5xx/split-ignores-local", split, 2, func(c *Config, n uint32) { c.Consecutive5xx = n; c.ConsecutiveLocalOriginFailure = 0 }, 502, 201, ConnectFailed, KindConsecutive5xx},
		{"gateway/502", gwOnly, 5, func(c *Config, n uint32) { c.ConsecutiveGatewayFailure = n }, 502, 500, 0, KindConsecutiveGatewayFailure},
		{"gateway/504", gwOnly, 2, func(c *Config, n uint32) { c.ConsecutiveGatewayFailure = n }, 504, 200, 0, KindConsecutiveGatewayFailure},
		{"gateway/connect-failed-no-split", gwOnly, 3, func(c *Config, n uint32) { c.ConsecutiveGatewayFailure = n }, ConnectFailed, 500, ConnectSucceeded, KindConsecutiveGatewayFailure},
		{"gateway/timeout-no-split", gwOnly, 3, func(c *Config, n uint32) { c.ConsecutiveGatewayFailure = n }, Timeout, 200, ConnectSucceeded, KindConsecutiveGatewayFailure},
		{"local/connect-failed", split, 5, func(c *Config, n uint32) { c.ConsecutiveLocalOriginFailure = n; c.Consecutive5xx = 0 }, ConnectFailed, 503, 0, KindConsecutiveLocalOriginFailure},
		{"local/reset", split, 2, func(c *Config, n uint32) { c.ConsecutiveLocalOriginFailure = n; c.Consecutive5xx = 0 }, Reset, ConnectSucceeded, 0, KindConsecutiveLocalOriginFailure},
		{"local/timeout", split, 7, func(c *Config, n uint32) { c.ConsecutiveLocalOriginFailure = n; c.Consecutive5xx = 0 }, Timeout, 200, 0, KindConsecutiveLocalOriginFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			if tc.mod != nil {
				tc.mod(c)
			}
			tc.set(c, tc.threshold)
			d, hs := newDet(t, c, 1)
			h := hs[0]
			// A run one short, broken, then one short again: no ejection.
			for range 2 {
				for i := range tc.threshold - 1 {
					if _, ok := observe(d, h, tc.fail, t0); ok || h.Ejected() {
						t.Fatalf("ejected after %d failures, threshold %d", i+1, tc.threshold)
					}
					if tc.notReset != 0 {
						observe(d, h, tc.notReset, t0)
					}
				}
				observe(d, h, tc.reset, t0)
			}
			for i := range tc.threshold - 1 {
				if _, ok := observe(d, h, tc.fail, t0); ok {
					t.Fatalf("ejected after %d failures", i+1)
				}
			}
			ev, ok := observe(d, h, tc.fail, t0)
			if !ok || !h.Ejected() {
				t.Fatalf("not ejected at the threshold %d", tc.threshold)
			}
			want := Event{Service: "outbound|80||svc", Host: "10.0.0.1:80", Action: Eject, Detector: tc.kind, At: t0,
				Numbers: Numbers{Consecutive: tc.threshold, Threshold: float64(tc.threshold)}, Duration: 30 * time.Second, Multiplier: 1}
			if ev != want {
				t.Fatalf("event\n got %+v\nwant %+v", ev, want)
			}
			if s := d.Stats().ByKind[tc.kind]; s.Detected != 1 || s.Ejected != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestConsecutiveOffAndNotEnforced: threshold 0 never trips; a trip whose draw
// fails is counted, ejects nothing, and the run starts again.
func TestConsecutiveOffAndNotEnforced(t *testing.T) {
	c := base()
	c.Consecutive5xx = 0
	d, hs := newDet(t, c, 1)
	for range 100 {
		if tr := d.Observe(hs[0], 500); tr != 0 {
			t.Fatalf("threshold 0 tripped: %b", tr)
		}
	}
	c = base()
	c.EnforcingConsecutive5xx = 30
	d, hs = newDet(t, c, 1)
	for _, tc := range []struct {
		draw  uint64
		eject bool
	}{{130, false}, {99, false}, {29, true}} {
		for range 4 {
			if d.Observe(hs[0], 500) != 0 {
				t.Fatal("tripped early")
			}
		}
		tr := d.Observe(hs[0], 500)
		_, ok := d.Trip(hs[0], tr, t0, func() uint64 { return tc.draw })
		if ok != tc.eject || hs[0].Ejected() != tc.eject {
			t.Fatalf("draw %d: ejected %v, want %v", tc.draw, ok, tc.eject)
		}
	}
	if s := d.Stats().ByKind[KindConsecutive5xx]; s.Detected != 3 || s.NotEnforced != 2 || s.Ejected != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestBothConsecutiveTrip: one 503 completing both runs ejects once (gateway first,
// as Envoy posts it); the 5xx counter of the ejected host is kept, as in Envoy.
func TestBothConsecutiveTrip(t *testing.T) {
	c := base()
	c.EnforcingConsecutiveGatewayFailure = 100
	d, hs := newDet(t, c, 1)
	for range 4 {
		observe(d, hs[0], 503, t0)
	}
	tr := d.Observe(hs[0], 503)
	if tr != TripGateway|Trip5xx {
		t.Fatalf("trips %b", tr)
	}
	ev, ok := d.Trip(hs[0], tr, t0, always)
	if !ok || ev.Detector != KindConsecutiveGatewayFailure {
		t.Fatalf("event %+v %v", ev, ok)
	}
	if hs[0].consGateway.Load() != 0 || hs[0].cons5xx.Load() != 5 {
		t.Fatalf("counters gateway %d 5xx %d", hs[0].consGateway.Load(), hs[0].cons5xx.Load())
	}
}

// TestTripIgnoredWhenEjectedOrNotMember: Envoy ignores trips of an ejected host and
// of a host no longer in the cluster.
func TestTripIgnoredWhenEjectedOrNotMember(t *testing.T) {
	d, hs := newDet(t, base(), 2)
	if _, ok := d.Trip(hs[0], Trip5xx, t0, always); !ok {
		t.Fatal("not ejected")
	}
	if _, ok := d.Trip(hs[0], Trip5xx, t0, always); ok {
		t.Fatal("ejected twice")
	}
	d.Remove(hs[1])
	if _, ok := d.Trip(hs[1], Trip5xx, t0, always); ok || hs[1].Ejected() {
		t.Fatal("non-member ejected")
	}
}

// hostRates sets each host's interval counts: total and successes.
func hostRates(d *Detector, hs []*Host, counts [][2]uint64) {
	for i, c := range counts {
		hs[i].ext.Store(c[0]<<32 | c[1])
	}
}

// interval runs the first Tick (which starts an interval) and returns a time at
// which the next one ends.
func startInterval(t *testing.T, d *Detector) time.Time {
	t.Helper()
	if evs := d.Tick(t0, always, nil); len(evs) != 0 {
		t.Fatalf("start events %+v", evs)
	}
	return t0.Add(d.Config().Interval)
}

// TestSuccessRate: mean − stdev × factor over hosts with the volume, strictly
// below; too little volume or too few hosts judge nothing.
func TestSuccessRate(t *testing.T) {
	srCfg := func() *Config {
		c := base()
		c.Consecutive5xx = 0
		c.SuccessRate = &SuccessRate{MinimumHosts: 5, RequestVolume: 100, StdevFactor: 1.9, Enforcing: 100}
		return c
	}
	// Envoy's worked example: {50, 100, 100, 100, 100}: mean 90, stdev 20,
	// threshold 90 − 1.9 × 20 = 52.
	for _, tc := range []struct {
		name   string
		mod    func(*Config)
		counts [][2]uint64
		eject  []int
	}{
		{"envoy-example", nil, [][2]uint64{{100, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}}, []int{0}},
		{"volume-one-short", nil, [][2]uint64{{99, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}}, nil},
		// Four hosts at factor 1: threshold 100 − 12.5 − 21.65 = 65.85.
		{"volume-one-short-but-four-hosts-suffice", func(c *Config) { c.SuccessRate.MinimumHosts, c.SuccessRate.StdevFactor = 4, 1 },
			[][2]uint64{{99, 0}, {100, 50}, {100, 100}, {100, 100}, {100, 100}}, []int{1}},
		{"too-few-hosts", func(c *Config) { c.SuccessRate.MinimumHosts = 6 },
			[][2]uint64{{100, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}}, nil},
		{"idle-host-not-judged", nil, [][2]uint64{{0, 0}, {100, 100}, {100, 100}, {100, 100}, {100, 100}}, nil},
		{"all-equal", nil, [][2]uint64{{100, 90}, {100, 90}, {100, 90}, {100, 90}, {100, 90}}, nil},
		{"not-enforced", func(c *Config) { c.SuccessRate.Enforcing = 0 },
			[][2]uint64{{100, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}}, nil},
		{"factor-1", func(c *Config) { c.SuccessRate.StdevFactor = 1 }, // threshold 70
			[][2]uint64{{200, 130}, {200, 200}, {200, 200}, {200, 200}, {200, 200}}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := srCfg()
			if tc.mod != nil {
				tc.mod(c)
			}
			d, hs := newDet(t, c, len(tc.counts))
			end := startInterval(t, d)
			hostRates(d, hs, tc.counts)
			// One nanosecond early: nothing.
			if evs := d.Tick(end.Add(-1), always, nil); len(evs) != 0 {
				t.Fatalf("early tick: %+v", evs)
			}
			evs := d.Tick(end, always, nil)
			var got []int
			for _, e := range evs {
				for i, h := range hs {
					if h.Addr == e.Host {
						got = append(got, i)
					}
				}
				if e.Detector != KindSuccessRate || e.Action != Eject {
					t.Fatalf("event %+v", e)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.eject) {
				t.Fatalf("ejected %v, want %v (%+v)", got, tc.eject, evs)
			}
		})
	}
	// The numbers of the worked example.
	d, hs := newDet(t, srCfg(), 5)
	end := startInterval(t, d)
	hostRates(d, hs, [][2]uint64{{100, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}})
	evs := d.Tick(end, always, nil)
	if len(evs) != 1 {
		t.Fatalf("events %+v", evs)
	}
	n := evs[0].Numbers
	if n.Rate != 50 || n.Mean != 90 || n.Stdev != 20 || math.Abs(n.Threshold-52) > 1e-9 || n.Volume != 100 {
		t.Fatalf("numbers %+v", n)
	}
	if got := n.Describe(KindSuccessRate); got != "success rate 50.0% < threshold 52.0% (mean 90.0%, stdev 20.0, 100 requests)" {
		t.Fatal(got)
	}
	// The boundary: one host down by d among five at 100 gives mean 100 − d/5, stdev
	// 2d/5, so it is below the threshold exactly when the factor is under 2; at 2 it
	// equals it (50 = 90 − 2 × 20) and stays: the comparison is strict, as Envoy's.
	for _, tc := range []struct {
		factor float64
		eject  bool
	}{{1.999, true}, {2, false}} {
		c := srCfg()
		c.SuccessRate.StdevFactor = tc.factor
		d, hs := newDet(t, c, 5)
		end := startInterval(t, d)
		hostRates(d, hs, [][2]uint64{{100, 50}, {100, 100}, {100, 100}, {100, 100}, {100, 100}})
		if evs := d.Tick(end, always, nil); (len(evs) == 1) != tc.eject {
			t.Fatalf("factor %v: %+v", tc.factor, evs)
		}
	}
}

// TestFailurePercentage: failure % ≥ threshold over hosts with the volume.
func TestFailurePercentage(t *testing.T) {
	fpCfg := func() *Config {
		c := base()
		c.Consecutive5xx = 0
		c.FailurePercentage = &FailurePercentage{Threshold: 85, MinimumHosts: 5, RequestVolume: 50, Enforcing: 100}
		return c
	}
	ok5 := [2]uint64{50, 50}
	for _, tc := range []struct {
		name   string
		mod    func(*Config)
		counts [][2]uint64
		eject  []int
	}{
		{"at-threshold", nil, [][2]uint64{{100, 15}, ok5, ok5, ok5, ok5}, []int{0}},
		{"one-below", nil, [][2]uint64{{100, 16}, ok5, ok5, ok5, ok5}, nil},
		{"volume-at", nil, [][2]uint64{{50, 0}, ok5, ok5, ok5, ok5}, []int{0}},
		{"volume-one-short", nil, [][2]uint64{{49, 0}, ok5, ok5, ok5, ok5}, nil},
		{"min-hosts-one-short", func(c *Config) { c.FailurePercentage.MinimumHosts = 6 }, [][2]uint64{{100, 0}, ok5, ok5, ok5, ok5}, nil},
		{"all-failing", nil, [][2]uint64{{100, 0}, {100, 0}, {100, 0}, {100, 0}, {100, 0}}, []int{0, 1, 2, 3, 4}},
		{"threshold-0-everything", func(c *Config) { c.FailurePercentage.Threshold = 0 }, [][2]uint64{ok5, ok5, ok5, ok5, ok5}, []int{0, 1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fpCfg()
			if tc.mod != nil {
				tc.mod(c)
			}
			d, hs := newDet(t, c, len(tc.counts))
			end := startInterval(t, d)
			hostRates(d, hs, tc.counts)
			var got []int
			for _, e := range d.Tick(end, always, nil) {
				if e.Detector != KindFailurePercentage {
					t.Fatalf("event %+v", e)
				}
				got = append(got, int(e.Host[7]-'1'))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.eject) {
				t.Fatalf("ejected %v, want %v", got, tc.eject)
			}
		})
	}
}

// TestLocalOriginRates: with the split, local-origin results feed their own
// success rate and failure percentage; without it they are statuses.
func TestLocalOriginRates(t *testing.T) {
	c := base()
	c.Consecutive5xx, c.ConsecutiveLocalOriginFailure = 0, 0
	c.SplitExternalLocalOriginErrors = true
	c.FailurePercentage = &FailurePercentage{Threshold: 50, MinimumHosts: 2, RequestVolume: 10, Enforcing: 0, EnforcingLocalOrigin: 100}
	d, hs := newDet(t, c, 2)
	end := startInterval(t, d)
	for range 10 {
		d.Observe(hs[0], ConnectFailed)
		d.Observe(hs[0], 200) // a response: the connection worked (local success)
		d.Observe(hs[1], ConnectSucceeded)
		d.Observe(hs[1], 500) // external: 100% failure, not enforced
	}
	evs := d.Tick(end, always, nil)
	if len(evs) != 1 || evs[0].Host != hs[0].Addr || evs[0].Detector != KindFailurePercentageLocalOrigin || evs[0].Numbers.Rate != 50 {
		t.Fatalf("events %+v", evs)
	}
	if s := d.Stats().ByKind[KindFailurePercentage]; s.Detected != 1 || s.NotEnforced != 1 {
		t.Fatalf("external stats %+v", s)
	}
	// Split off: ten connect failures are ten 503s, judged as external.
	c.SplitExternalLocalOriginErrors = false
	c.FailurePercentage.Enforcing = 100
	d, hs = newDet(t, c, 2)
	end = startInterval(t, d)
	for range 10 {
		d.Observe(hs[0], Timeout)
		d.Observe(hs[1], 200)
		d.Observe(hs[1], ConnectSucceeded) // counts for nothing
	}
	if tot, _ := unpack(hs[1].ext.Load()); tot != 10 {
		t.Fatalf("host 2 volume %d", tot)
	}
	evs = d.Tick(end, always, nil)
	if len(evs) != 1 || evs[0].Host != hs[0].Addr || evs[0].Detector != KindFailurePercentage || evs[0].Numbers.Volume != 10 {
		t.Fatalf("events %+v", evs)
	}
}

// TestEjectionTimeGrowthCapAndDecay: base × multiplier capped at max; the
// multiplier grows while base × multiplier < max + base (Envoy) and decays by one
// per interval in service.
func TestEjectionTimeGrowthCapAndDecay(t *testing.T) {
	c := base()
	c.Interval, c.BaseEjectionTime, c.MaxEjectionTime = time.Second, 10*time.Second, 35*time.Second
	d, hs := newDet(t, c, 1)
	h := hs[0]
	now := t0
	d.Tick(now, always, nil)
	want := []struct {
		dur  time.Duration
		mult uint32
	}{{10 * time.Second, 1}, {20 * time.Second, 2}, {30 * time.Second, 3}, {35 * time.Second, 4}, {35 * time.Second, 5}, {35 * time.Second, 5}}
	for i, w := range want {
		ev, ok := d.Trip(h, Trip5xx, now, always)
		if !ok || ev.Duration != w.dur || ev.Multiplier != w.mult {
			t.Fatalf("ejection %d: %v %+v, want %s ×%d", i+1, ok, ev, w.dur, w.mult)
		}
		// Back exactly at its time, not a nanosecond before.
		if evs := d.Tick(now.Add(w.dur-1), always, nil); h.Ejected() == false || len(evs) != 0 {
			t.Fatalf("returned early: %+v", evs)
		}
		now = now.Add(w.dur)
		evs := d.Tick(now, always, nil)
		if h.Ejected() || len(evs) != 1 || evs[0].Action != Return || evs[0].Duration != w.dur || evs[0].Reason != ReasonServed {
			t.Fatalf("return %d: %+v", i+1, evs)
		}
	}
	// Decay: one step per interval tick at least an interval after the return.
	ret, mult := now, h.multiplier
	var next time.Time
	for ticks := 0; mult > 0; ticks++ {
		if ticks > 20 {
			t.Fatal("multiplier never decays")
		}
		next, _ = d.Next()
		d.Tick(next, always, nil)
		if next.Sub(ret) >= c.Interval {
			mult--
		}
		if h.multiplier != mult {
			t.Fatalf("multiplier %d at %s after the return, want %d", h.multiplier, next.Sub(ret), mult)
		}
	}
	if ev, _ := d.Trip(h, Trip5xx, next, always); ev.Duration != 10*time.Second {
		t.Fatalf("after decay: %+v", ev)
	}
}

// TestJitterBounds: the jitter is rnd() mod jitter: within [0, jitter).
func TestJitterBounds(t *testing.T) {
	c := base()
	c.MaxEjectionTimeJitter = 5 * time.Second
	for _, tc := range []struct {
		draw uint64
		want time.Duration
	}{
		{0, 30 * time.Second},
		{uint64(5*time.Second) - 1, 35*time.Second - 1},
		{uint64(5 * time.Second), 30 * time.Second},
		{math.MaxUint64, 30*time.Second + time.Duration(math.MaxUint64%uint64(5*time.Second))},
	} {
		d, hs := newDet(t, c, 1)
		ev, ok := d.Trip(hs[0], Trip5xx, t0, func() uint64 { return tc.draw })
		if !ok || ev.Duration != tc.want || ev.Duration < 30*time.Second || ev.Duration >= 35*time.Second {
			t.Fatalf("draw %d: %s, want %s in [30s, 35s)", tc.draw, ev.Duration, tc.want)
		}
		if ej := d.Ejections(nil); len(ej) != 1 || ej[0].Until != t0.Add(tc.want) {
			t.Fatalf("ejections %+v", ej)
		}
	}
}

// TestMaxEjectionPercent: never more than floor(percent × hosts / 100), at least
// one when the percent is above zero.
func TestMaxEjectionPercent(t *testing.T) {
	for _, tc := range []struct {
		hosts int
		pct   uint32
		want  int
	}{
		{1, 10, 1}, {2, 10, 1}, {3, 10, 1}, {10, 10, 1}, {11, 10, 1}, {19, 10, 1}, {20, 10, 2},
		{1, 0, 0}, {3, 0, 0}, {11, 0, 0},
		{1, 50, 1}, {2, 50, 1}, {3, 50, 1}, {10, 50, 5}, {11, 50, 5},
		{1, 100, 1}, {2, 100, 2}, {3, 100, 3}, {10, 100, 10}, {11, 100, 11},
		{3, 34, 1}, {3, 66, 1}, {3, 67, 2}, {10, 99, 9}, {11, 9, 0 + 1},
	} {
		t.Run(fmt.Sprintf("%dhosts-%dpct", tc.hosts, tc.pct), func(t *testing.T) {
			c := base()
			c.MaxEjectionPercent = tc.pct
			if got := c.MaxEjected(tc.hosts); got != tc.want {
				t.Fatalf("MaxEjected %d, want %d", got, tc.want)
			}
			d, hs := newDet(t, c, tc.hosts)
			ejected := 0
			for _, h := range hs {
				if _, ok := d.Trip(h, Trip5xx, t0, always); ok {
					ejected++
				}
			}
			if n, _ := d.Ejected(); ejected != tc.want || n != tc.want {
				t.Fatalf("ejected %d (%d), want %d", ejected, n, tc.want)
			}
			if s := d.Stats().ByKind[KindConsecutive5xx]; s.Overflow != uint64(tc.hosts-tc.want) {
				t.Fatalf("overflow %d", s.Overflow)
			}
		})
	}
}

// TestCapHeldOnChange: a lower percent, fewer hosts or detection off return the
// hosts above the cap (soonest due first) at once; the events come with the next
// Tick.
func TestCapHeldOnChange(t *testing.T) {
	c := base()
	d, hs := newDet(t, c, 10)
	for i, h := range hs[:4] {
		d.Trip(h, Trip5xx, t0.Add(time.Duration(i)*time.Second), always) // hs[0] is due back first
	}
	lower := *c
	lower.MaxEjectionPercent = 20
	if err := d.Configure(&lower); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.Ejected(); n != 2 || hs[0].Ejected() || hs[1].Ejected() || !hs[2].Ejected() {
		t.Fatalf("ejected %d: %v %v %v", n, hs[0].Ejected(), hs[1].Ejected(), hs[2].Ejected())
	}
	at := t0.Add(5 * time.Second)
	evs := d.Tick(at, always, nil)
	if len(evs) != 2 || evs[0].Host != hs[0].Addr || evs[0].Reason != ReasonCapped || evs[0].At != at || evs[0].Duration != 5*time.Second {
		t.Fatalf("events %+v", evs)
	}
	// 10 hosts at 20% allow 2; down to 5 hosts allow 1.
	d.Remove(hs[5:]...)
	if n, m := d.Ejected(); n != 1 || m != 5 {
		t.Fatalf("ejected %d of %d", n, m)
	}
	// Removing an ejected host returns it.
	d.Remove(hs[3])
	if n, _ := d.Ejected(); n != 0 || hs[3].Ejected() {
		t.Fatal("removed host still ejected")
	}
	evs = d.Tick(at, always, nil)
	if len(evs) != 2 || evs[0].Reason != ReasonCapped || evs[1].Reason != ReasonRemoved {
		t.Fatalf("events %+v", evs)
	}
	// Off: everything returns.
	d.Trip(hs[0], Trip5xx, at, always)
	if err := d.Configure(nil); err != nil {
		t.Fatal(err)
	}
	if hs[0].Ejected() || d.Observe(hs[0], 500) != 0 {
		t.Fatal("detection off still ejects or counts")
	}
	if evs := d.Tick(at, always, nil); len(evs) != 1 || evs[0].Reason != ReasonDisabled {
		t.Fatalf("events %+v", evs)
	}
	if _, ok := d.Next(); ok {
		t.Fatal("off detector has work")
	}
}

// TestConfigureKeepsState: a new configuration keeps counts and ejections; a bad
// one changes nothing and names the field.
func TestConfigureKeepsState(t *testing.T) {
	d, hs := newDet(t, base(), 2)
	for range 3 {
		observe(d, hs[0], 500, t0)
	}
	d.Trip(hs[1], Trip5xx, t0, always)
	c := base()
	c.Consecutive5xx = 4
	if err := d.Configure(c); err != nil {
		t.Fatal(err)
	}
	c.Consecutive5xx = 1 // Configure copied it
	if _, ok := observe(d, hs[0], 500, t0); !ok {
		t.Fatal("the fourth 5xx under the new threshold did not eject: counts were lost")
	}
	if !hs[1].Ejected() {
		t.Fatal("ejection lost")
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Interval = 0 }, "interval"},
		{func(c *Config) { c.BaseEjectionTime = time.Microsecond }, "baseEjectionTime"},
		{func(c *Config) { c.MaxEjectionTime = time.Second }, "maxEjectionTime: 1s is less than baseEjectionTime 30s"},
		{func(c *Config) { c.MaxEjectionTimeJitter = -1 }, "maxEjectionTimeJitter"},
		{func(c *Config) { c.MaxEjectionPercent = 101 }, "maxEjectionPercent: 101"},
		{func(c *Config) { c.EnforcingConsecutive5xx = 101 }, "enforcingConsecutive5xx"},
		{func(c *Config) { c.SuccessRate = &SuccessRate{StdevFactor: math.NaN()} }, "successRate.stdevFactor"},
		{func(c *Config) { c.FailurePercentage = &FailurePercentage{Threshold: 101} }, "failurePercentage.threshold"},
	} {
		c := base()
		tc.mod(c)
		err := d.Configure(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"outbound|80||svc"`) {
			t.Fatalf("error %v, want %q", err, tc.want)
		}
	}
	if d.Config().Consecutive5xx != 4 {
		t.Fatal("a refused configuration was applied")
	}
	// The bounds themselves are accepted.
	c = base()
	c.Interval, c.BaseEjectionTime, c.MaxEjectionTime, c.MaxEjectionTimeJitter = MinDuration, MinDuration, MaxDuration, MaxDuration
	if err := d.Configure(c); err != nil {
		t.Fatal(err)
	}
}

// TestNext: a new detector wants a tick at once; then the interval's end or the
// first return, whichever is first.
func TestNext(t *testing.T) {
	d, hs := newDet(t, base(), 3)
	if at, ok := d.Next(); !ok || !at.IsZero() {
		t.Fatalf("next %v %v", at, ok)
	}
	d.Tick(t0, always, nil)
	if at, _ := d.Next(); !at.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("next %v", at)
	}
	base := base()
	base.BaseEjectionTime = time.Second
	d.Configure(base) // same interval: the schedule stays
	d.Trip(hs[0], Trip5xx, t0, always)
	if at, _ := d.Next(); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("next %v", at)
	}
	base.Interval = time.Minute
	d.Configure(base)
	if at, ok := d.Next(); !ok || !at.IsZero() {
		t.Fatalf("after an interval change: %v %v", at, ok)
	}
}

// TestObserveAllocatesNothing: the request path's calls.
func TestObserveAllocatesNothing(t *testing.T) {
	c := base()
	c.SplitExternalLocalOriginErrors = true
	d, hs := newDet(t, c, 1)
	outs := []Outcome{200, 503, ConnectFailed, ConnectSucceeded, Timeout, 404}
	if n := testing.AllocsPerRun(1000, func() {
		for _, o := range outs {
			if tr := d.Observe(hs[0], o); tr != 0 {
				d.Trip(hs[0], tr, t0, always)
			}
		}
		_ = hs[0].Ejected()
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestSetHosts: members become exactly the given hosts; a dropped ejected host
// returns, a kept one stays out, and the cap follows the new count.
func TestSetHosts(t *testing.T) {
	c := base()
	c.MaxEjectionPercent = 50
	d, hs := newDet(t, c, 4)
	d.Trip(hs[0], Trip5xx, t0, always)
	d.Trip(hs[1], Trip5xx, t0.Add(time.Second), always)
	extra := &Host{Addr: "10.0.0.9:80"}
	d.SetHosts([]*Host{hs[1], hs[2], hs[3], extra})
	if d.Len() != 4 || hs[0].Ejected() || !hs[1].Ejected() {
		t.Fatalf("members %d, ejected %v %v", d.Len(), hs[0].Ejected(), hs[1].Ejected())
	}
	if _, ok := d.Trip(extra, Trip5xx, t0, always); !ok {
		t.Fatal("new member not ejectable")
	}
	d.SetHosts([]*Host{hs[1], extra}) // 2 hosts at 50%: one may be out
	if n, m := d.Ejected(); n != 1 || m != 2 || extra.Ejected() || !hs[1].Ejected() {
		t.Fatalf("ejected %d of %d (the one due back first returns: %v)", n, m, extra.Ejected())
	}
	evs := d.Tick(t0.Add(2*time.Second), always, nil)
	if len(evs) != 2 || evs[0].Reason != ReasonRemoved || evs[0].Host != hs[0].Addr || evs[1].Reason != ReasonCapped || evs[1].Host != extra.Addr {
		t.Fatalf("events %+v", evs)
	}
}

// TestLimits: each bound is accepted at its value and refused one past it.
func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"max-duration", func(c *Config) { c.MaxEjectionTime, c.MaxEjectionTimeJitter = MaxDuration, MaxDuration }, true},
		{"max-duration+1", func(c *Config) { c.MaxEjectionTime = MaxDuration + 1 }, false},
		{"jitter-max-duration+1", func(c *Config) { c.MaxEjectionTimeJitter = MaxDuration + 1 }, false},
		{"min-duration", func(c *Config) { c.Interval = MinDuration }, true},
		{"min-duration-1", func(c *Config) { c.Interval = MinDuration - 1 }, false},
		{"stdev-max", func(c *Config) { c.SuccessRate = &SuccessRate{StdevFactor: MaxStdevFactor} }, true},
		{"stdev-max+", func(c *Config) {
			c.SuccessRate = &SuccessRate{StdevFactor: math.Nextafter(MaxStdevFactor, math.Inf(1))}
		}, false},
		{"percent-100", func(c *Config) {
			c.FailurePercentage = &FailurePercentage{Threshold: 100, Enforcing: 100, EnforcingLocalOrigin: 100}
		}, true},
		{"percent-101", func(c *Config) { c.FailurePercentage = &FailurePercentage{EnforcingLocalOrigin: 101} }, false},
	} {
		c := base()
		tc.mod(c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	// MaxPendingEvents: the returns Configure(nil) makes are all reported up to the
	// bound; past it they still happen and are counted.
	for _, n := range []int{MaxPendingEvents, MaxPendingEvents + 1} {
		d, hs := newDet(t, base(), n)
		for _, h := range hs {
			d.Trip(h, Trip5xx, t0, always)
		}
		if err := d.Configure(nil); err != nil {
			t.Fatal(err)
		}
		evs := d.Tick(t0, always, nil)
		if len(evs) != MaxPendingEvents || d.Stats().DroppedEvents != uint64(n-MaxPendingEvents) {
			t.Fatalf("%d returns: %d events, %d dropped", n, len(evs), d.Stats().DroppedEvents)
		}
		if e, _ := d.Ejected(); e != 0 {
			t.Fatalf("%d still ejected", e)
		}
	}
}
