package outlier

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPendingEvents bounds the return events Configure and Remove queue for the next
// Tick; beyond it the returns still happen but their events are only counted
// (Stats.DroppedEvents).
const MaxPendingEvents = 1024

// Detector is one service key's outlier detection: its member hosts, their
// ejections and the detectors' verdicts. Safe for concurrent use.
//
// The request path calls Observe (lock-free, allocation-free) and, on the rare
// outcome that trips a consecutive detector, Trip. The sidecar's outlier goroutine
// calls Tick at Next. Configuration is applied in place (Configure): host state,
// ejections and counts stay.
type Detector struct {
	key    string
	totals *Totals                // nil: none
	cfg    atomic.Pointer[Config] // nil: detection off; written under mu
	// gen changes on every ejection and return, so pickers recompute their
	// panic-mode verdict only when it moved.
	gen        atomic.Uint64
	panicPicks atomic.Uint64

	mu      sync.Mutex
	hosts   []*Host // members, in the order added
	ejected int     // members ejected
	next    time.Time
	stats   Stats
	pending []pendingReturn
	dropped uint64
	// Scratch for Tick, kept to spare the garbage.
	srHosts, fpHosts     []rated
	extCounts, locCounts []uint64
	interval             time.Duration // the interval next was scheduled with
}

// pendingReturn is a return made without a clock (Configure, Remove), reported by
// the next Tick with its time.
type pendingReturn struct {
	h     *Host
	ev    Event
	since time.Time
}

type rated struct {
	h      *Host
	rate   float64 // success %
	volume uint64
}

// New returns a detector for key with detection off and no hosts. Its verdicts are
// also counted in totals (nil: not), which outlive the detector: a sidecar's
// counters stay monotonic when a Service and its detector are retired.
func New(key string, totals *Totals) *Detector { return &Detector{key: key, totals: totals} }

// Totals count the verdicts of many detectors (a sidecar's /metrics). Safe for
// concurrent use.
type Totals struct {
	detected, ejected, notEnforced, overflow [NumKinds]atomic.Uint64
	returns, panicPicks                      atomic.Uint64
}

// Stats reads the totals.
func (t *Totals) Stats() Stats {
	var s Stats
	for k := range NumKinds {
		s.ByKind[k] = KindStats{Detected: t.detected[k].Load(), Ejected: t.ejected[k].Load(),
			NotEnforced: t.notEnforced[k].Load(), Overflow: t.overflow[k].Load()}
	}
	s.Returns, s.PanicPicks = t.returns.Load(), t.panicPicks.Load()
	return s
}

// Key is the service key the detector was made for.
func (d *Detector) Key() string { return d.key }

// Config returns the configuration in force (nil: off). Do not modify it.
func (d *Detector) Config() *Config { return d.cfg.Load() }

// Generation changes whenever a member is ejected or returns.
func (d *Detector) Generation() uint64 { return d.gen.Load() }

// CountPanicPick counts a pick that ignored ejections (panic mode).
func (d *Detector) CountPanicPick() {
	d.panicPicks.Add(1)
	if d.totals != nil {
		d.totals.panicPicks.Add(1)
	}
}

// Configure applies c (nil: detection off) in place, keeping host state, ejections
// and counts. A bad c is an error naming the field and changes nothing. Turning
// detection off returns every ejected host at once; a lower maxEjectionPercent
// returns the hosts above it. The returns are events of the next Tick.
func (d *Detector) Configure(c *Config) error {
	if c != nil {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("service %q: %w", d.key, err)
		}
		cc := *c
		if c.SuccessRate != nil {
			sr := *c.SuccessRate
			cc.SuccessRate = &sr
		}
		if c.FailurePercentage != nil {
			fp := *c.FailurePercentage
			cc.FailurePercentage = &fp
		}
		c = &cc
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg.Store(c)
	if c == nil {
		for _, h := range d.hosts {
			if h.ejected.Load() {
				d.returnLocked(h, time.Time{}, ReasonDisabled, nil)
			}
		}
		d.next, d.interval = time.Time{}, 0
		return nil
	}
	if c.Interval != d.interval {
		d.next = time.Time{} // the next Tick starts the new interval
	}
	d.capLocked()
	return nil
}

// Add makes h a member (no-op if it is one). Hosts count toward
// maxEjectionPercent and are judged at each interval only while members.
func (d *Detector) Add(h *Host) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.member {
		return
	}
	h.member = true
	d.hosts = append(d.hosts, h)
	if h.ejected.Load() {
		d.ejected++
	}
}

// Remove ends the membership of hs (a removed host that was ejected returns: it is
// gone from every configuration). Fewer hosts can mean fewer allowed ejections:
// those above the cap return too. The returns are events of the next Tick.
func (d *Detector) Remove(hs ...*Host) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, h := range hs {
		if !h.member {
			continue
		}
		if h.ejected.Load() {
			d.returnLocked(h, time.Time{}, ReasonRemoved, nil)
		}
		h.member = false
		n++
	}
	if n == 0 {
		return
	}
	d.hosts = slices.DeleteFunc(d.hosts, func(h *Host) bool { return !h.member })
	d.capLocked()
}

// SetHosts makes hs the members, in that order: new ones are added, the others
// removed as by Remove.
func (d *Detector) SetHosts(hs []*Host) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range hs {
		h.keep = true
	}
	for _, h := range d.hosts {
		if !h.keep {
			if h.ejected.Load() {
				d.returnLocked(h, time.Time{}, ReasonRemoved, nil)
			}
			h.member = false
		}
	}
	clear(d.hosts)
	d.hosts = d.hosts[:0]
	for _, h := range hs {
		h.keep = false
		if !h.member {
			h.member = true
			if h.ejected.Load() {
				d.ejected++
			}
		}
		d.hosts = append(d.hosts, h)
	}
	d.capLocked()
}

// Len reports the member count.
func (d *Detector) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.hosts)
}

// Observe counts one outcome of a request to h and reports the consecutive detectors
// it tripped: the request path's call. It takes no lock and allocates nothing; a
// non-zero result is passed to Trip.
//
// Mapping, as Envoy's router reports results: a status is an upstream result (5xx a
// failure, anything else a success); with the split on it also means the connection
// worked (a local-origin success). ConnectSucceeded is a local-origin success (split
// on) or nothing (split off). ConnectFailed, Reset and Timeout are local-origin
// failures with the split on; with it off they count as the statuses Envoy maps them
// to: 503 for a connect failure or reset, 504 for a timeout.
func (d *Detector) Observe(h *Host, o Outcome) Trips {
	c := d.cfg.Load()
	if c == nil {
		return 0
	}
	if !o.LocalOrigin() {
		if c.SplitExternalLocalOriginErrors {
			h.localSuccess()
		}
		return h.status(c, uint16(o))
	}
	switch o {
	case ConnectSucceeded:
		if c.SplitExternalLocalOriginErrors {
			h.localSuccess()
		}
		return 0
	case ConnectFailed, Reset, Timeout:
		if c.SplitExternalLocalOriginErrors {
			return h.localFailure(c)
		}
		if o == Timeout {
			return h.status(c, timeoutStatus)
		}
		return h.status(c, connectFailedStatus)
	}
	return 0
}

// Trip handles what Observe reported: each tripped detector (gateway errors before
// 5xx, as Envoy posts them) ejects h unless it is already out, maxEjectionPercent is
// reached, or the enforcing percent's draw (rnd()%100 < percent) says no. Each
// detector that judged h starts counting again from zero. now is the request's
// time. It returns the ejection, if any.
func (d *Detector) Trip(h *Host, t Trips, now time.Time, rnd func() uint64) (Event, bool) {
	if t == 0 {
		return Event{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cfg.Load()
	if c == nil || !h.member {
		return Event{}, false
	}
	var ev Event
	var ok bool
	for _, s := range [...]struct {
		bit       Trips
		kind      Kind
		threshold uint32
		enforcing uint32
		counter   *atomic.Uint32
	}{
		{TripGateway, KindConsecutiveGatewayFailure, c.ConsecutiveGatewayFailure, c.EnforcingConsecutiveGatewayFailure, &h.consGateway},
		{Trip5xx, KindConsecutive5xx, c.Consecutive5xx, c.EnforcingConsecutive5xx, &h.cons5xx},
		{TripLocalOrigin, KindConsecutiveLocalOriginFailure, c.ConsecutiveLocalOriginFailure, c.EnforcingConsecutiveLocalOriginFailure, &h.consLocal},
	} {
		if t&s.bit == 0 || s.threshold == 0 {
			continue
		}
		if s.kind == KindConsecutiveLocalOriginFailure && !c.SplitExternalLocalOriginErrors {
			continue
		}
		if h.ejected.Load() {
			break // Envoy: an ejected host's trips are ignored, its counters kept
		}
		n := Numbers{Consecutive: s.threshold, Threshold: float64(s.threshold)}
		if e, did := d.ejectLocked(c, h, s.kind, s.enforcing, n, now, rnd); did {
			ev, ok = e, true
		}
		s.counter.Store(0)
	}
	return ev, ok
}

// Next is when Tick has work: the end of the current interval or the earliest
// ejection's end, whichever is first. ok is false when there is nothing to do
// (detection off and no event pending); a zero time with ok means "now".
func (d *Detector) Next() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) > 0 {
		return time.Time{}, true
	}
	if d.cfg.Load() == nil {
		return time.Time{}, false
	}
	if d.next.IsZero() {
		return time.Time{}, true
	}
	t := d.next
	for _, h := range d.hosts {
		if h.ejected.Load() && h.until.Before(t) {
			t = h.until
		}
	}
	return t, true
}

// Tick does what is due at now and appends its events to evs: returns whose
// ejection time has passed (at once, not at the next interval as in Envoy), and at
// the end of each interval the success-rate and failure-percentage verdicts over the
// interval's outcomes and the decay of the multiplier of hosts that stayed in. rnd
// draws the enforcing percents and jitter.
func (d *Detector) Tick(now time.Time, rnd func() uint64, evs []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pending {
		p.ev.At, p.ev.Duration = now, now.Sub(p.since)
		if !p.h.ejected.Load() {
			p.h.lastReturn = now // the multiplier's decay counts from here
		}
		evs = append(evs, p.ev)
	}
	clear(d.pending)
	d.pending = d.pending[:0]
	c := d.cfg.Load()
	if c == nil {
		return evs
	}
	for _, h := range d.hosts {
		if h.ejected.Load() && !now.Before(h.until) {
			evs = d.returnLocked(h, now, ReasonServed, evs)
		}
	}
	if d.next.IsZero() {
		// A new interval starts: what was counted before it is discarded so each
		// verdict covers one whole interval.
		for _, h := range d.hosts {
			h.ext.Store(0)
			h.local.Store(0)
		}
		d.next, d.interval = now.Add(c.Interval), c.Interval
		return evs
	}
	if now.Before(d.next) {
		return evs
	}
	d.next = now.Add(c.Interval)
	evs = d.intervalLocked(c, now, rnd, evs)
	return evs
}

func (d *Detector) intervalLocked(c *Config, now time.Time, rnd func() uint64, evs []Event) []Event {
	d.extCounts, d.locCounts = d.extCounts[:0], d.locCounts[:0]
	for _, h := range d.hosts {
		d.extCounts = append(d.extCounts, h.ext.Swap(0))
		d.locCounts = append(d.locCounts, h.local.Swap(0))
	}
	var srE, srLE, fpE, fpLE uint32
	if sr := c.SuccessRate; sr != nil {
		srE, srLE = sr.Enforcing, sr.EnforcingLocalOrigin
	}
	if fp := c.FailurePercentage; fp != nil {
		fpE, fpLE = fp.Enforcing, fp.EnforcingLocalOrigin
	}
	evs = d.rateLocked(c, d.extCounts, KindSuccessRate, KindFailurePercentage, srE, fpE, now, rnd, evs)
	if c.SplitExternalLocalOriginErrors { // without the split nothing is counted as local origin
		evs = d.rateLocked(c, d.locCounts, KindSuccessRateLocalOrigin, KindFailurePercentageLocalOrigin, srLE, fpLE, now, rnd, evs)
	}
	// Envoy: a host in service whose last return is at least an interval ago has
	// its multiplier decremented, once per interval.
	for _, h := range d.hosts {
		if !h.ejected.Load() && !h.lastReturn.IsZero() && now.Sub(h.lastReturn) >= c.Interval && h.multiplier > 0 {
			h.multiplier--
		}
	}
	return evs
}

// rateLocked runs success rate and failure percentage over one origin's counts.
func (d *Detector) rateLocked(c *Config, counts []uint64, srK, fpK Kind, srE, fpE uint32, now time.Time, rnd func() uint64, evs []Event) []Event {
	sr, fp := c.SuccessRate, c.FailurePercentage
	d.srHosts, d.fpHosts = d.srHosts[:0], d.fpHosts[:0]
	sum := 0.0
	for i, h := range d.hosts {
		if h.ejected.Load() {
			continue // Envoy: ejected hosts are not judged nor part of the mean
		}
		total, succ := unpack(counts[i])
		if total == 0 {
			continue
		}
		r := rated{h: h, rate: float64(succ) * 100 / float64(total), volume: total}
		if sr != nil && total >= uint64(sr.RequestVolume) {
			d.srHosts = append(d.srHosts, r)
			sum += r.rate
		}
		if fp != nil && total >= uint64(fp.RequestVolume) {
			d.fpHosts = append(d.fpHosts, r)
		}
	}
	if sr != nil && len(d.srHosts) > 0 && len(d.srHosts) >= int(sr.MinimumHosts) {
		mean := sum / float64(len(d.srHosts))
		variance := 0.0
		for _, r := range d.srHosts {
			variance += (r.rate - mean) * (r.rate - mean)
		}
		stdev := math.Sqrt(variance / float64(len(d.srHosts)))
		threshold := mean - sr.StdevFactor*stdev
		for _, r := range d.srHosts {
			if r.rate < threshold && !r.h.ejected.Load() {
				n := Numbers{Volume: r.volume, Rate: r.rate, Mean: mean, Stdev: stdev, Threshold: threshold}
				if e, ok := d.ejectLocked(c, r.h, srK, srE, n, now, rnd); ok {
					evs = append(evs, e)
				}
			}
		}
	}
	if fp != nil && len(d.fpHosts) > 0 && len(d.fpHosts) >= int(fp.MinimumHosts) {
		for _, r := range d.fpHosts {
			if failed := 100 - r.rate; failed >= float64(fp.Threshold) && !r.h.ejected.Load() {
				n := Numbers{Volume: r.volume, Rate: failed, Threshold: float64(fp.Threshold)}
				if e, ok := d.ejectLocked(c, r.h, fpK, fpE, n, now, rnd); ok {
					evs = append(evs, e)
				}
			}
		}
	}
	clear(d.srHosts) // drop the host pointers until the next interval
	clear(d.fpHosts)
	return evs
}

// ejectLocked ejects h for detector k if the cap and the enforcing draw allow.
// Envoy's order: the cap first (an outlier over it is an overflow), then the draw.
func (d *Detector) ejectLocked(c *Config, h *Host, k Kind, enforcing uint32, n Numbers, now time.Time, rnd func() uint64) (Event, bool) {
	st := &d.stats.ByKind[k]
	st.Detected++
	t := d.totals
	if t != nil {
		t.detected[k].Add(1)
	}
	if d.ejected >= c.MaxEjected(len(d.hosts)) {
		st.Overflow++
		if t != nil {
			t.overflow[k].Add(1)
		}
		return Event{}, false
	}
	if enforcing < 100 && (enforcing == 0 || rnd()%100 >= uint64(enforcing)) {
		st.NotEnforced++
		if t != nil {
			t.notEnforced[k].Add(1)
		}
		return Event{}, false
	}
	// Envoy grows the multiplier while base × multiplier < max + base, so it stops
	// one step past the cap (the time itself is capped).
	if time.Duration(h.multiplier)*c.BaseEjectionTime < c.MaxEjectionTime+c.BaseEjectionTime && h.multiplier < math.MaxUint32 {
		h.multiplier++
	}
	dur := c.EjectionTime(h.multiplier)
	if j := c.MaxEjectionTimeJitter; j > 0 {
		dur += time.Duration(rnd() % uint64(j))
	}
	h.since, h.until, h.kind, h.nums = now, now.Add(dur), k, n
	h.ejections++
	h.ejected.Store(true)
	d.ejected++
	d.gen.Add(1)
	st.Ejected++
	if t != nil {
		t.ejected[k].Add(1)
	}
	return Event{Service: d.key, Host: h.Addr, Action: Eject, Detector: k, Numbers: n, At: now, Duration: dur, Multiplier: h.multiplier}, true
}

// returnLocked puts h back in service. With evs nil (no now: Configure, Remove) the
// event is queued for the next Tick, which stamps its time.
func (d *Detector) returnLocked(h *Host, now time.Time, why string, evs []Event) []Event {
	h.ejected.Store(false)
	// Envoy resets the consecutive counters so a host close to a threshold before
	// its ejection is not ejected again on very few new errors.
	h.cons5xx.Store(0)
	h.consGateway.Store(0)
	h.consLocal.Store(0)
	d.ejected--
	d.gen.Add(1)
	d.stats.Returns++
	if d.totals != nil {
		d.totals.returns.Add(1)
	}
	ev := Event{Service: d.key, Host: h.Addr, Action: Return, Detector: h.kind, Numbers: h.nums, At: now,
		Multiplier: h.multiplier, Reason: why}
	if now.IsZero() {
		if len(d.pending) < MaxPendingEvents {
			d.pending = append(d.pending, pendingReturn{h: h, ev: ev, since: h.since})
		} else {
			d.dropped++
		}
		return evs
	}
	h.lastReturn = now
	ev.Duration = now.Sub(h.since)
	return append(evs, ev)
}

// capLocked returns ejected members beyond maxEjectionPercent, those due back
// soonest first, so the cap holds exactly after a change of percent or host count.
func (d *Detector) capLocked() {
	c := d.cfg.Load()
	if c == nil {
		return
	}
	over := d.ejected - c.MaxEjected(len(d.hosts))
	for over > 0 {
		var first *Host
		for _, h := range d.hosts {
			if h.ejected.Load() && (first == nil || h.until.Before(first.until)) {
				first = h
			}
		}
		d.returnLocked(first, time.Time{}, ReasonCapped, nil)
		over--
	}
}

// Ejections appends the ejected members to out, in member order.
func (d *Detector) Ejections(out []Ejection) []Ejection {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hosts {
		if h.ejected.Load() {
			out = append(out, Ejection{Service: d.key, Host: h.Addr, Detector: h.kind, Numbers: h.nums, Since: h.since,
				Until: h.until, Duration: h.until.Sub(h.since), Multiplier: h.multiplier, Ejections: h.ejections})
		}
	}
	return out
}

// Ejected reports how many members are ejected, and the member count.
func (d *Detector) Ejected() (ejected, hosts int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ejected, len(d.hosts)
}

// Stats returns the detector's counters.
func (d *Detector) Stats() Stats {
	d.mu.Lock()
	s := d.stats
	s.DroppedEvents = d.dropped
	d.mu.Unlock()
	s.PanicPicks = d.panicPicks.Load()
	return s
}
