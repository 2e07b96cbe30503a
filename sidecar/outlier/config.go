package outlier

import (
	"fmt"
	"math"
	"time"
)

// Bounds on a Config (Validate): Envoy's durations are in milliseconds, and a cap
// keeps base × multiplier arithmetic far from overflow.
const (
	MinDuration = time.Millisecond
	MaxDuration = 10 * 365 * 24 * time.Hour
	// MaxStdevFactor bounds SuccessRate.StdevFactor (Envoy's uint32 / 1000).
	MaxStdevFactor = float64(math.MaxUint32) / 1000
)

// Config is a cluster's outlier detection, field for field
// xdsresource.Outlier (dataplane compile copies it): Envoy's defaults are already
// applied by the decoder. Percents are 0..100. The local-origin fields apply only
// with SplitExternalLocalOriginErrors, as in Envoy.
type Config struct {
	Consecutive5xx                         uint32 // 0: detector off
	ConsecutiveGatewayFailure              uint32 // 0: detector off
	ConsecutiveLocalOriginFailure          uint32 // 0: detector off; split only
	EnforcingConsecutive5xx                uint32
	EnforcingConsecutiveGatewayFailure     uint32
	EnforcingConsecutiveLocalOriginFailure uint32
	SplitExternalLocalOriginErrors         bool
	SuccessRate                            *SuccessRate       // nil: detector off
	FailurePercentage                      *FailurePercentage // nil: detector off
	Interval                               time.Duration
	BaseEjectionTime                       time.Duration
	MaxEjectionTime                        time.Duration // ≥ BaseEjectionTime
	MaxEjectionTimeJitter                  time.Duration // 0: none; else a uniform [0, jitter) is added
	MaxEjectionPercent                     uint32
}

// SuccessRate is the success-rate detector: at each interval, over the hosts with at
// least RequestVolume requests in it (once at least MinimumHosts qualify), a host
// whose success rate is below mean − StdevFactor × stdev is an outlier.
type SuccessRate struct {
	MinimumHosts, RequestVolume uint32
	StdevFactor                 float64 // Envoy's success_rate_stdev_factor / 1000 (1900 → 1.9)
	Enforcing                   uint32
	EnforcingLocalOrigin        uint32
}

// FailurePercentage is the failure-percentage detector: at each interval, over the
// hosts with at least RequestVolume requests (once at least MinimumHosts qualify), a
// host whose failure percentage is ≥ Threshold is an outlier.
type FailurePercentage struct {
	Threshold, MinimumHosts, RequestVolume uint32
	Enforcing                              uint32
	EnforcingLocalOrigin                   uint32
}

// Validate checks c; the error names the field. Nothing is applied on an error.
func (c *Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
		zero bool
	}{
		{"interval", c.Interval, false},
		{"baseEjectionTime", c.BaseEjectionTime, false},
		{"maxEjectionTime", c.MaxEjectionTime, false},
		{"maxEjectionTimeJitter", c.MaxEjectionTimeJitter, true},
	} {
		if (d.v == 0 && d.zero) || (d.v >= MinDuration && d.v <= MaxDuration) {
			continue
		}
		return fmt.Errorf("outlier: %s: %s outside [%s, %s]", d.name, d.v, MinDuration, MaxDuration)
	}
	if c.MaxEjectionTime < c.BaseEjectionTime {
		return fmt.Errorf("outlier: maxEjectionTime: %s is less than baseEjectionTime %s", c.MaxEjectionTime, c.BaseEjectionTime)
	}
	type pct struct {
		name string
		v    uint32
	}
	pcts := []pct{
		{"enforcingConsecutive5xx", c.EnforcingConsecutive5xx},
		{"enforcingConsecutiveGatewayFailure", c.EnforcingConsecutiveGatewayFailure},
		{"enforcingConsecutiveLocalOriginFailure", c.EnforcingConsecutiveLocalOriginFailure},
		{"maxEjectionPercent", c.MaxEjectionPercent},
	}
	if s := c.SuccessRate; s != nil {
		pcts = append(pcts, pct{"successRate.enforcing", s.Enforcing}, pct{"successRate.enforcingLocalOrigin", s.EnforcingLocalOrigin})
		if !(s.StdevFactor >= 0 && s.StdevFactor <= MaxStdevFactor) {
			return fmt.Errorf("outlier: successRate.stdevFactor: %v outside [0, %v]", s.StdevFactor, MaxStdevFactor)
		}
	}
	if f := c.FailurePercentage; f != nil {
		pcts = append(pcts, pct{"failurePercentage.threshold", f.Threshold}, pct{"failurePercentage.enforcing", f.Enforcing},
			pct{"failurePercentage.enforcingLocalOrigin", f.EnforcingLocalOrigin})
	}
	for _, p := range pcts {
		if p.v > 100 {
			return fmt.Errorf("outlier: %s: %d outside 0..100", p.name, p.v)
		}
	}
	return nil
}

// EjectionTime is how long the n-th ejection in a row lasts before jitter:
// BaseEjectionTime × n, capped at MaxEjectionTime (Envoy's
// min(base × ejectTimeBackoff, max)).
func (c *Config) EjectionTime(n uint32) time.Duration {
	d := c.BaseEjectionTime * time.Duration(n)
	if n > 0 && (d < c.BaseEjectionTime || d/time.Duration(n) != c.BaseEjectionTime) { // overflow
		return c.MaxEjectionTime
	}
	return min(d, c.MaxEjectionTime)
}

// MaxEjected is how many of hosts may be ejected at once: floor(MaxEjectionPercent ×
// hosts / 100), but at least one when the percent is above zero and there is a
// host, as Envoy did before always_eject_one_host (and does with it set): 10% of 3
// hosts is 0.3, rounded down to 0, raised to 1. It never rounds up otherwise: 10% of
// 11 hosts is 1, not 2 (an Envoy before 1.29 allowed a second ejection there, since it
// compared the share already ejected, 1/11 < 10%).
func (c *Config) MaxEjected(hosts int) int {
	if hosts <= 0 || c.MaxEjectionPercent == 0 {
		return 0
	}
	return max(int(uint64(c.MaxEjectionPercent)*uint64(hosts)/100), 1)
}
