// Package ratelimit is the sidecar's local rate limit: a token bucket per
// DestinationPolicy localRateLimit, applied per client sidecar per Service (and,
// on the sidecar that backs the Service, on its inbound port).
//
// It is a pure core (DESIGN.md convention 6): the caller passes now (on the
// request path, the request's own start time, so the check reads no clock);
// there is no goroutine and no lock on the request path.
//
// The bucket is one int64, the GCRA "theoretical arrival time" (TAT): the time
// at which the bucket would be full again. At time now it holds
//
//	tokens = burst − max(0, TAT − now) / interval,   interval = 1s / requestsPerSecond
//
// A take succeeds when a whole token is left, that is when
// max(TAT, now) + interval − now ≤ burst × interval, and then moves TAT to
// max(TAT, now) + interval with one compare-and-swap. That is exactly a token
// bucket of capacity burst refilled at requestsPerSecond, kept in one word: no
// separate token count and timestamp that would need a lock to change together.
//
// Time is counted in ticks of 1/16 ns from the limiter's epoch (its first
// Configure), through time.Time.Sub, so the monotonic clock is used when now
// carries one: a wall-clock step does not move the bucket. A now earlier than a
// previous one never mints tokens (max(TAT, now) keeps the later TAT).
package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on a configuration. Outside them Configure fails (a NACK naming the
// field); both are far beyond what one sidecar serves or a policy means.
const (
	// MaxRequestsPerSecond bounds requestsPerSecond (the same bound as
	// xdsresource.MaxRateLimitRPS): the interval between two tokens is then at
	// least 1 ns (16 ticks). Rounding it to a whole tick is off by at most half a
	// tick: 0.003 % at 100,000 rps, 0.3 % at 10⁸, 3 % near 10⁹, rates no sidecar
	// serves (a limit that high only says "no limit" precisely).
	MaxRequestsPerSecond = 1e9
	// MaxFillTime bounds burst / requestsPerSecond, the time an empty bucket
	// takes to fill: it keeps the bucket's arithmetic inside an int64.
	MaxFillTime = 365 * 24 * time.Hour
)

// tickShift: a tick is 1/16 ns (1<<tickShift ticks per nanosecond), so that
// intervals that are not whole nanoseconds (3 rps: 333,333,333.3 ns) lose
// almost nothing to rounding.
const tickShift = 4

// maxElapsed bounds |now − epoch| in nanoseconds (about 9 years): beyond it the
// bucket's clock stops, so ticks plus a full bucket's span never overflow.
const maxElapsed = int64(1) << (62 - tickShift)

// Config is one bucket's settings.
type Config struct {
	// RequestsPerSecond is the refill rate; 0 turns the limiter off (every take
	// succeeds, nothing is counted).
	RequestsPerSecond float64
	// Burst is the bucket's capacity in requests; 0 means DefaultBurst.
	Burst uint32
	// DryRun counts the takes that would be refused (Stats.DryRunRejected) and
	// lets them through, without spending a token for them.
	DryRun bool
}

// DefaultBurst is the capacity used when Config.Burst is 0: one second's worth of
// requests (rounded up), at least 1, as xdsresource.DefaultBurst (which decode
// already applies). It bounds the first second after an idle period to about
// 2 × requestsPerSecond.
func DefaultBurst(rps float64) uint32 {
	if !(rps >= 1) { // also NaN
		return 1
	}
	return uint32(min(math.Ceil(rps), math.MaxUint32))
}

// Validate reports what is wrong with c, naming the field.
func (c Config) Validate() error {
	_, err := c.params()
	return err
}

// params are a configuration in ticks; immutable once published.
type params struct {
	cfg      Config    // as given, Burst defaulted
	epoch    time.Time // tick 0; carried over by every reconfiguration
	interval int64     // ticks per token, ≥ 1
	span     int64     // burst × interval: how far TAT may run ahead of now
}

func (c Config) params() (*params, error) {
	rps := c.RequestsPerSecond
	switch {
	case math.IsNaN(rps) || math.IsInf(rps, 0):
		return nil, fmt.Errorf("requestsPerSecond: must be a finite number, got %v", rps)
	case rps < 0:
		return nil, fmt.Errorf("requestsPerSecond: must not be negative, got %v", rps)
	case rps == 0:
		return nil, nil
	case rps > MaxRequestsPerSecond:
		return nil, fmt.Errorf("requestsPerSecond: %v is above the limit %v", rps, float64(MaxRequestsPerSecond))
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst(rps)
	}
	if fill := float64(c.Burst) / rps; fill > MaxFillTime.Seconds() {
		return nil, fmt.Errorf("burst: %d requests at %v per second take %.0fs to refill, limit %v", c.Burst, rps, fill, MaxFillTime)
	}
	iv := int64(math.Round(float64(time.Second<<tickShift) / rps))
	return &params{cfg: c, interval: max(iv, 1), span: int64(c.Burst) * max(iv, 1)}, nil
}

// ticks is now in this configuration's clock.
func (p *params) ticks(now time.Time) int64 {
	d := int64(now.Sub(p.epoch))
	return min(max(d, -maxElapsed), maxElapsed) << tickShift
}

// Limiter is a token bucket. The zero value is an unlimited limiter, ready to be
// configured; a nil *Limiter is unlimited too. Safe for concurrent use.
type Limiter struct {
	// tat is the bucket (see the package comment), in p's ticks. Written by
	// Allow (CAS) and by Configure; the counters beside it share its cache
	// line, which a successful CAS has just made this core's own.
	tat      atomic.Int64
	allowed  atomic.Uint64
	rejected atomic.Uint64
	dryRun   atomic.Uint64

	p  atomic.Pointer[params] // nil: off. Stored only by Configure, under mu.
	mu sync.Mutex             // serializes Configure
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid rate limit")

// New returns a limiter configured with c at now.
func New(c Config, now time.Time) (*Limiter, error) {
	l := &Limiter{}
	if err := l.Configure(c, now); err != nil {
		return nil, err
	}
	return l, nil
}

// Configure applies c in place at time now, keeping the bucket: a configuration
// swap that does not change the rate leaves every token where it was, and a
// changed rate or burst keeps the share of the bucket in use (tokens spent stay
// spent, at most the new burst). Turning the limiter on starts with a full
// bucket. A take racing a change of rate is judged by the old or the new one.
// The counters are never reset. On error nothing changes.
func (l *Limiter) Configure(c Config, now time.Time) error {
	np, err := c.params()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.p.Load()
	switch {
	case np == nil:
		l.p.Store(nil)
		return nil
	case old == nil:
		// A full bucket: TAT at (or before) now.
		np.epoch = now
		l.tat.Store(0)
		l.p.Store(np)
		return nil
	}
	np.epoch = old.epoch
	l.p.Store(np)
	if np.interval == old.interval && np.span == old.span {
		return nil // same bucket (DryRun may have changed)
	}
	t := old.ticks(now)
	for {
		tat := l.tat.Load()
		// Tokens in use, in the old interval, carried into the new one.
		used := float64(max(tat-t, 0)) / float64(old.interval)
		debt := int64(min(used*float64(np.interval), float64(np.span)))
		if l.tat.CompareAndSwap(tat, t+debt) {
			return nil
		}
	}
}

// Config returns the configuration in force (Burst defaulted); the zero Config
// when off.
func (l *Limiter) Config() Config {
	if l == nil {
		return Config{}
	}
	if p := l.p.Load(); p != nil {
		return p.cfg
	}
	return Config{}
}

// Enabled reports whether a rate is configured.
func (l *Limiter) Enabled() bool { return l != nil && l.p.Load() != nil }

// Allow takes one token at now. ok false means refuse the request; retryAfter
// is then how long until a token is back (at now's pace). In dry-run mode a
// take that finds the bucket empty is counted and allowed (ok true, no token
// spent). Allocation-free; one compare-and-swap when a token is taken.
func (l *Limiter) Allow(now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	p := l.p.Load()
	if p == nil {
		return true, 0
	}
	t := p.ticks(now)
	for {
		tat := l.tat.Load()
		next := max(tat, t) + p.interval
		if over := next - t - p.span; over > 0 {
			if p.cfg.DryRun {
				l.dryRun.Add(1)
				return true, 0
			}
			l.rejected.Add(1)
			// Round up to a whole nanosecond: a retry at now+retryAfter finds a token.
			return false, time.Duration((over + 1<<tickShift - 1) >> tickShift)
		}
		if l.tat.CompareAndSwap(tat, next) {
			l.allowed.Add(1)
			return true, 0
		}
	}
}

// Tokens reports the whole tokens in the bucket at now (for tests and status).
func (l *Limiter) Tokens(now time.Time) uint32 {
	if l == nil {
		return 0
	}
	p := l.p.Load()
	if p == nil {
		return 0
	}
	t := p.ticks(now)
	free := p.span - max(l.tat.Load()-t, 0)
	return uint32(max(free, 0) / p.interval)
}

// Stats are a limiter's counters since it was created.
type Stats struct {
	Allowed        uint64 // takes that got a token
	Rejected       uint64 // takes refused (answered 429)
	DryRunRejected uint64 // takes that found no token and were let through (DryRun)
}

// Stats reads the counters (each atomically; together only approximately).
func (l *Limiter) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{Allowed: l.allowed.Load(), Rejected: l.rejected.Load(), DryRunRejected: l.dryRun.Load()}
}

// RetryAfterSeconds is retryAfter as the retry-after header says it: whole
// seconds, rounded up, at least 1.
func RetryAfterSeconds(retryAfter time.Duration) int64 {
	s := int64((retryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}
